"""The training loop's control: validation cadence, checkpoints, the time budget.

Oracle: the step numbers the settings imply, counted by hand.
"""

from __future__ import annotations

import torch
from eagle_hal.testing.models import tiny_target
from eagle_hal.train.dataset import DatasetInfo, DistillDataset
from eagle_hal.train.recipe import TrainConfig
from eagle_hal.train.trainer import train_eagle1

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
