"""Comparisons that fail with messages pointing at the fault, and a chi-square test.

Every assertion names the op or mode, the field, how many entries differ and the first one,
so a vendor reading the report knows where to look.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch

__all__ = ["assert_close", "assert_same", "chi_square_pvalue"]


def _host(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().to("cpu")


def assert_same(what: str, got: torch.Tensor, expected: torch.Tensor) -> None:
    """Exact equality (integer and bool outputs), shape and values."""
    got, expected = _host(got), _host(expected)
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if got.dtype.is_floating_point != expected.dtype.is_floating_point:
        raise AssertionError(f"{what}: dtype {got.dtype}, expected {expected.dtype}")
    differ = got.to(expected.dtype) != expected
    if bool(differ.any()):
        first = tuple(int(i) for i in differ.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(differ.sum())} of {differ.numel()} entries differ from the reference; "
            f"first at index {first}: got {got[first].item()}, expected {expected[first].item()}"
        )


def assert_close(
    what: str, got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float
) -> None:
    """``|got - expected| <= atol + rtol * |expected|`` everywhere (in float64)."""
    got, expected = _host(got).double(), _host(expected).double()
    if tuple(got.shape) != tuple(expected.shape):
        raise AssertionError(f"{what}: shape {tuple(got.shape)}, expected {tuple(expected.shape)}")
    if not bool(torch.isfinite(got).all()):
        raise AssertionError(f"{what}: {int((~torch.isfinite(got)).sum())} non-finite entries")
    error = (got - expected).abs()
    bad = error > atol + rtol * expected.abs()
    if bool(bad.any()):
        first = tuple(int(i) for i in bad.nonzero()[0])
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {bad.numel()} entries outside "
            f"atol={atol:g} rtol={rtol:g}; "
            f"max abs error {error.max().item():.3g}; first at index {first}: got "
            f"{got[first].item():.6g}, expected {expected[first].item():.6g}"
        )


def chi_square_pvalue(
    counts: Mapping[object, int], probs: Mapping[object, float], samples: int
) -> float:
    """Pearson's goodness-of-fit p-value of ``counts`` against ``probs``; cells expected
    fewer than 5 times are pooled. Raises ``AssertionError`` if an outcome of probability 0
    was observed (no statistic can excuse it)."""
    impossible = [cell for cell, n in counts.items() if n and probs.get(cell, 0.0) <= 0.0]
    if impossible:
        raise AssertionError(f"outcomes of probability 0 were emitted: {impossible[:5]}")
    observed, expected, pool_o, pool_e = [], [], 0.0, 0.0
    for cell, p in probs.items():
        if p * samples >= 5:
            observed.append(float(counts.get(cell, 0)))
            expected.append(p * samples)
        else:
            pool_o += counts.get(cell, 0)
            pool_e += p * samples
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    o = torch.tensor(observed, dtype=torch.float64)
    e = torch.tensor(expected, dtype=torch.float64)
    statistic = ((o - e) ** 2 / e).sum()
    dof = torch.tensor(max(len(observed) - 1, 1) / 2.0, dtype=torch.float64)
    return float(torch.special.gammaincc(dof, statistic / 2).item())
