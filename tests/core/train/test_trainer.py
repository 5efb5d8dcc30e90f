"""The training loop's control: validation cadence, checkpoints, the time budget; an
EAGLE-3 head through the same loop.

Oracle: the step numbers the settings imply, counted by hand; for EAGLE-3, the loss falls
and the head's own readout starts as a copy of the target's.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.testing.models import tiny_target
from eagle_hal.train.dataset import DatasetInfo, DistillDataset
from eagle_hal.train.recipe import TrainConfig
from eagle_hal.train.trainer import train_eagle1, train_head

INFO = DatasetInfo("tiny", "", 0, 6, 4, 8, (1.0,), (0.0,), 1.0, 0.0)


def _dataset():
    gen = torch.Generator().manual_seed(2)
    sequences = [torch.randint(3, 61, (10 + i,), generator=gen).tolist() for i in range(6)]
    held_out = [i == 5 for i in range(6)]
    return DistillDataset.from_sequences(sequences, [4] * 6, held_out, [0.0] * 6, INFO)


def test_validation_cadence_and_checkpoints(cpu_backend):
    """Validations at every multiple of validate_every and after the last step; each one
    reaches the callback with the history so far."""
    target = tiny_target(seed=51, vocab=61)
    seen = []
    config = TrainConfig(
        steps=7, batch_size=2, validate_every=3, validation_prompts=1, validation_new_tokens=4
    )
    result = train_eagle1(
        cpu_backend,
        target,
        _dataset(),
        config,
        on_validation=lambda state: seen.append((state.step, len(state.validations))),
        progress=False,
    )
    assert result.steps == 7
    assert [p.step for p in result.validations] == [3, 6, 7]
    assert seen == [(3, 1), (6, 2), (7, 3)]
    assert all(1.0 <= p.accept_length <= 6.0 for p in result.validations)


def test_exhausted_time_budget_stops_after_one_step(cpu_backend):
    """A budget already spent stops the loop after its first step, then validates once."""
    target = tiny_target(seed=52, vocab=61)
    config = TrainConfig(
        steps=50,
        batch_size=2,
        validate_every=10,
        validation_prompts=1,
        validation_new_tokens=4,
        time_budget_s=0.0,
    )
    result = train_eagle1(cpu_backend, target, _dataset(), config, progress=False)
    assert result.steps == 1
    assert [p.step for p in result.validations] == [1]


def test_time_budget_refits_the_schedule_to_the_later_step_time(cpu_backend, monkeypatch):
    """Steps 10-40 are slow (150 ms on a fake clock), later ones fast (50 ms), as on the
    H200, and each validation (every 100 steps) takes 2 s. The first fit shortens the run;
    the refit from the next window lengthens it back, timing steps without the validations
    and budgeting those apart, so the run uses what the budget affords (counted by hand
    below) and still ends within it."""
    import types

    import eagle_hal.train.trainer as trainer

    clock = {"t": 0.0, "steps": 0}
    monkeypatch.setattr(trainer, "time", types.SimpleNamespace(perf_counter=lambda: clock["t"]))
    real_clip = trainer.torch.nn.utils.clip_grad_norm_

    def clip_and_tick(*args, **kwargs):  # one training step passes
        clock["steps"] += 1
        clock["t"] += 0.15 if clock["steps"] <= 40 else 0.05
        return real_clip(*args, **kwargs)

    def slow_accept_length(*args, **kwargs):  # one validation passes
        clock["t"] += 2.0
        return 1.0

    monkeypatch.setattr(trainer.torch.nn.utils, "clip_grad_norm_", clip_and_tick)
    monkeypatch.setattr(trainer, "engine_accept_length", slow_accept_length)
    target = tiny_target(seed=53, vocab=61)
    budget = 100.0
    config = TrainConfig(
        steps=5000,
        batch_size=2,
        validate_every=100,
        validation_prompts=1,
        validation_new_tokens=2,
        time_budget_s=budget,
    )
    result = train_eagle1(cpu_backend, target, _dataset(), config, progress=False)
    # by hand: at step 40, 6 s spent: (85 - 6) / 0.15 + 40 = 566 steps. At step 240, 20 s
    # spent (6 + 200 x 0.05 + the validations at 100 and 200); steps take 0.05 s, plus
    # 2 s per 100 steps of validation: (85 - 20) / 0.07 + 240 = 1168 steps. At step 440
    # 34 s are spent, past 30 % of the budget: no more refits. Timing the window with its
    # validations in would give (85 - 20) / 0.09 + 240 = 962; without the validations
    # budgeted, (85 - 20) / 0.05 + 240 = 1540, past the hard stop.
    assert result.steps == 1168
    assert clock["t"] <= budget


def test_eagle3_head_trains_through_the_same_loop(cpu_backend):
    """``variant="eagle3"`` on an 8-layer target: 40 steps unrolled over 2 draft steps lower
    the loss; the validations run the engine with the EAGLE-3 head and reach the callback;
    the readout trained away from the target's (a copy, not shared); features of the wrong
    streams are refused."""
    from eagle_hal.model.eagle import Eagle3DraftModel
    from eagle_hal.train.features import FeatureStore

    target = tiny_target(seed=54, vocab=61, layers=8)
    readout = target.lm_head.weight.detach().clone()
    seen = []
    config = TrainConfig.for_variant(
        "eagle3", steps=40, batch_size=2, lr=3e-3, unroll_steps=2, validate_every=20,
        validation_prompts=1, validation_new_tokens=8,
    )
    result = train_head(cpu_backend, target, _dataset(), config, progress=False,
                        on_validation=lambda state: seen.append(type(state.head)))
    assert isinstance(result.head, Eagle3DraftModel) and result.head.aux_layers == (2, 4, 5)
    assert result.steps == 40 and seen == [Eagle3DraftModel, Eagle3DraftModel]
    assert result.last_loss < 0.8 * result.first_loss
    assert all(1.0 <= p.accept_length <= 6.0 for p in result.validations)
    assert torch.equal(target.lm_head.weight, readout)
    assert not torch.equal(result.head.lm_head.weight, readout)
    eagle1_features = FeatureStore.compute(target, _dataset(), progress=False)
    with pytest.raises(ValueError, match="streams"):
        train_head(cpu_backend, target, _dataset(), config, features=eagle1_features,
                   progress=False)
