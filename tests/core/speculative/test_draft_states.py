"""``DraftStates``: what the last draft extend left for each request, against the rows
stored by hand (the oracle: the stored tensors' rows themselves)."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.speculative.drafting import DraftState, DraftStates


def _state(batch: int, seed: int) -> DraftState:
    g = torch.Generator().manual_seed(seed)
    return DraftState(torch.rand(batch, 4, generator=g), torch.randint(99, (batch, 4), generator=g),
                      torch.randn(batch, 8, generator=g))


def test_the_same_batch_gets_its_stack_back_and_any_other_order_its_rows():
    states, stored = DraftStates(), _state(3, 0)
    states.store([10, 11, 12], stored)
    assert states.stacked([10, 11, 12]) is stored
    picked = states.stacked([12, 10])
    for field, source in zip(picked, stored, strict=True):
        assert torch.equal(field, source[[2, 0]])


def test_rows_not_kept_keep_their_earlier_state_and_break_the_batch():
    states, first, second = DraftStates(), _state(2, 1), _state(2, 2)
    states.store([1, 2], first)
    states.store([1, 2], second, kept=[True, False])
    got = states.stacked([1, 2])
    assert got is not second
    for field, new, old in zip(got, second, first, strict=True):
        assert torch.equal(field[0], new[0]) and torch.equal(field[1], old[1])


def test_a_dropped_request_is_forgotten_and_the_batch_stack_with_it():
    states, stored = DraftStates(), _state(2, 3)
    states.store([5, 6], stored)
    states.drop(5)
    assert torch.equal(states.stacked([6]).hidden, stored.hidden[[1]])
    with pytest.raises(KeyError):  # a dropped request's state is not handed out
        states.stacked([5, 6])
