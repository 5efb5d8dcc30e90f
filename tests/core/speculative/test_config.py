"""SpecConfig validation and derived sizes, against counting by hand."""

from __future__ import annotations

import pytest
from eagle_hal.speculative.config import SpecConfig


def _count_candidates(steps: int, topk: int) -> int:
    """Brute force: K children of the root, then K*K candidates at every later step."""
    total, frontier = 0, 1
    for _ in range(steps):
        total += frontier * topk
        frontier = topk
    return total


@pytest.mark.parametrize("steps,topk", [(1, 1), (3, 1), (2, 2), (5, 4), (6, 8)])
def test_max_candidates(steps: int, topk: int) -> None:
    assert (SpecConfig(num_steps=steps, topk=topk, num_draft_tokens=2).max_candidates
            == _count_candidates(steps, topk))


def test_chain_default_is_s_plus_one() -> None:
    assert SpecConfig(num_steps=5, topk=1).draft_tokens == 6


def test_too_many_draft_tokens_rejected_with_reason() -> None:
    with pytest.raises(ValueError, match="at most 2"):
        SpecConfig(num_steps=2, topk=1, num_draft_tokens=4)


@pytest.mark.parametrize("kwargs", [{"num_steps": -1}, {"topk": 0}, {"num_draft_tokens": 0},
                                    {"num_draft_tokens": 65, "topk": 8}])
def test_bad_values_rejected(kwargs: dict) -> None:
    with pytest.raises(ValueError):
        SpecConfig(**kwargs)


def test_plain_through_spec_path() -> None:
    config = SpecConfig(num_steps=0)
    assert config.draft_tokens == 1 and config.max_candidates == 0


def test_settings_over_a_spec_keep_its_n_only_where_its_shape_stays() -> None:
    """``with_settings``: None keeps the base's value; N carries over only with the base's
    S and K (a default N must not land on a shape it does not fit), else it is the one
    given or the new shape's default, counted by hand."""
    tree = SpecConfig(num_steps=3, topk=2, num_draft_tokens=4, adaptive=True,
                      adaptive_steps=(0, 2))
    assert tree.with_settings() == tree
    assert tree.with_settings(3, 2) == tree  # the same shape named explicitly
    deeper = tree.with_settings(steps=5)
    assert (deeper.num_steps, deeper.topk, deeper.draft_tokens) == (5, 2, 2 * 5 + 1)
    assert deeper.adaptive and deeper.adaptive_steps == (0, 2)  # the rest is the base's
    wide = tree.with_settings(topk=4, draft_tokens=9)
    assert (wide.num_steps, wide.topk, wide.draft_tokens) == (3, 4, 9)
    chain = SpecConfig(num_steps=5, topk=4, num_draft_tokens=16).with_settings(1, 1)
    assert (chain.num_steps, chain.topk, chain.draft_tokens) == (1, 1, 2)
    with pytest.raises(ValueError, match="at most 4"):  # a given N is checked, not adapted
        SpecConfig(num_steps=5, topk=4, num_draft_tokens=16).with_settings(1, draft_tokens=16)


def test_the_adaptive_verify_budget_narrows_wide_trees_at_large_batches() -> None:
    """batch x N over the budget: N cut to budget // batch, never below S + 1, K kept;
    within the budget, at S = 0, a chain, or without a batch, nothing changes."""
    spec = SpecConfig(5, 4, 16, adaptive=True, adaptive_verify_budget=256)
    assert spec.with_steps(3, 16).draft_tokens == 16  # 16 x 16 = 256 fits
    assert (spec.with_steps(3, 32).draft_tokens, spec.with_steps(3, 32).topk) == (8, 4)
    assert spec.with_steps(3, 64).draft_tokens == 4  # 256 // 64
    assert spec.with_steps(5, 64).draft_tokens == 6  # S + 1 > 4
    assert spec.with_steps(1, 64).draft_tokens == 4  # of min(16, 4 + 1) = 5
    assert spec.with_steps(5, 256).draft_tokens == 6
    assert spec.with_steps(3).draft_tokens == 16 and spec.with_steps(0, 64).num_steps == 0
    chain = SpecConfig(5, 1, adaptive=True, adaptive_verify_budget=8)
    assert chain.with_steps(3, 64).draft_tokens == 4
    assert SpecConfig(5, 4, 16).with_steps(3, 64).draft_tokens == 16  # no budget
    with pytest.raises(ValueError, match="adaptive_verify_budget"):
        SpecConfig(5, 4, 16, adaptive=True, adaptive_verify_budget=0)
