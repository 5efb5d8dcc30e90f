"""SpecConfig validation and derived sizes, against counting by hand."""

from __future__ import annotations

import pytest

from eagle_hal.spec.config import SpecConfig


def _count_candidates(steps: int, topk: int) -> int:
    """Brute force: K children of the root, then K*K candidates at every later step."""
    total, frontier = 0, 1
    for _ in range(steps):
        total += frontier * topk
        frontier = topk
    return total


@pytest.mark.parametrize("steps,topk", [(1, 1), (3, 1), (2, 2), (5, 4), (6, 8)])
def test_max_candidates(steps: int, topk: int) -> None:
    assert SpecConfig(num_steps=steps, topk=topk, num_draft_tokens=2).max_candidates == _count_candidates(steps, topk)


def test_chain_default_is_s_plus_one() -> None:
    assert SpecConfig(num_steps=5, topk=1).draft_tokens == 6


def test_too_many_draft_tokens_rejected_with_reason() -> None:
    with pytest.raises(ValueError, match="at most 2"):
        SpecConfig(num_steps=2, topk=1, num_draft_tokens=4)


@pytest.mark.parametrize("kwargs", [{"num_steps": -1}, {"topk": 0}, {"num_draft_tokens": 0}, {"num_draft_tokens": 65, "topk": 8}])
def test_bad_values_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SpecConfig(**kwargs)


def test_plain_through_spec_path() -> None:
    config = SpecConfig(num_steps=0)
    assert config.draft_tokens == 1 and config.max_candidates == 0
