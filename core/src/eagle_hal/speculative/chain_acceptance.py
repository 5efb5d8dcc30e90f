"""A chain's accept length in closed form: tokens per verify pass for ``steps`` drafts that
are each accepted with probability ``alpha`` (independently, until the first rejection),
and its inverse. The adaptive controller's tests rate simulated depths by it
(``tests/core/speculative/adaptive_cost_models.py``).
"""

from __future__ import annotations

__all__ = ["expected_accept_length", "infer_acceptance_rate"]


def expected_accept_length(alpha: float, steps: int) -> float:
    """Tokens per verify for a chain of ``steps`` drafts with per-token acceptance ``alpha``."""
    if steps <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(steps + 1)
    return (1.0 - alpha ** (steps + 1)) / (1.0 - alpha)


def infer_acceptance_rate(accept_length: float, steps: int) -> float | None:
    """Invert ``expected_accept_length`` by bisection; ``None`` when S = 0 tells nothing."""
    if steps <= 0:
        return None
    target = min(max(accept_length, 1.0), steps + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if expected_accept_length(mid, steps) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2
