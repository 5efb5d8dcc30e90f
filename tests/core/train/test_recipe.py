"""The learning-rate schedule: linear warm-up, then a cosine down to the floor."""

from __future__ import annotations

import math

import pytest
from eagle_hal.train.recipe import TrainConfig


def test_warmup_then_cosine():
    """Rises linearly to lr over the warm-up, halfway down at the cosine's midpoint, and
    never below the floor after it."""
    config = TrainConfig(steps=200, lr=1e-3, warmup_fraction=0.1, min_lr_ratio=0.1)
    rates = [config.learning_rate(step) for step in range(200)]
    assert rates[0] == pytest.approx(1e-3 / 20)
    assert rates[19] == pytest.approx(1e-3)
    assert all(a < b for a, b in zip(rates[:19], rates[1:20], strict=False))
    assert all(a >= b for a, b in zip(rates[19:], rates[20:], strict=False))
    assert rates[20 + 90] == pytest.approx(1e-4 + 0.9e-3 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert min(rates[19:]) >= 1e-4 and rates[-1] == pytest.approx(1e-4, rel=0.01)


def test_shortened_run_ends_at_the_floor():
    """A run cut to fewer steps (a time budget) still reaches the floor at its end."""
    config = TrainConfig(steps=1000, lr=1e-3, warmup_fraction=0.05, min_lr_ratio=0.0)
    assert config.learning_rate(299, total_steps=300) == pytest.approx(0.0, abs=1e-6)


@pytest.mark.parametrize(
    "field,value",
    [
        ("steps", 0),
        ("lr", 0.0),
        ("warmup_fraction", 1.0),
        ("feature_noise", -1.0),
        ("cross_entropy_weight", -0.1),
        ("unroll_steps", 0),
        ("unroll_decay", 0.0),
    ],
)
def test_rejects_bad_settings(field, value):
    with pytest.raises(ValueError):
        TrainConfig(**{field: value})


def test_unroll_step_weights():
    """One weight per unroll step, decaying geometrically; one step by default."""
    assert TrainConfig().step_weights == (1.0,)
    assert TrainConfig(unroll_steps=3).step_weights == (1.0, 1.0, 1.0)
    assert TrainConfig(unroll_steps=3, unroll_decay=0.5).step_weights == (1.0, 0.5, 0.25)
