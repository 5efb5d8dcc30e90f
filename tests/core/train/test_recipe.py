"""The learning-rate schedule: linear warm-up, then a cosine down to the floor."""

from __future__ import annotations

import math

import pytest
from eagle_hal.train.recipe import Schedule, TrainConfig


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


def test_refitted_schedule_has_no_jumps_and_ends_at_the_floor():
    """A run planned for 5,000 steps, refitted to 339 at step 40 and to 940 at step 240 (a
    time budget timing slow early steps, then fast later ones): the rate rises only during
    the warm-up, moves by no more than a small step at each refit, and reaches the floor
    at the last step. The oracle is the shape asked for, checked step by step."""
    config = TrainConfig(steps=5000, lr=1e-3, warmup_fraction=0.05, min_lr_ratio=0.1)
    schedule = Schedule(config)
    rates = []
    for step in range(940):
        if step == 40:
            schedule.refit(step, 339)  # warm-up (was 250) becomes 17 steps: already over
        if step == 240:
            schedule.refit(step, 940)
        rates.append(schedule.learning_rate(step))
    peak = rates.index(max(rates))
    assert peak <= 40
    after = rates[peak:]
    # never rises after the warm-up
    assert all(a >= b for a, b in zip(after, after[1:], strict=False))
    assert max(a - b for a, b in zip(after, after[1:], strict=False)) < 0.02 * config.lr
    assert rates[-1] == pytest.approx(config.min_lr_ratio * config.lr, rel=0.01)
    # a run that keeps its length follows TrainConfig.learning_rate exactly
    plain = Schedule(config, 300)
    assert [plain.learning_rate(s) for s in range(300)] == [
        config.learning_rate(s, total_steps=300) for s in range(300)]


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


def test_rejects_a_loss_with_no_term():
    with pytest.raises(ValueError, match="at least one loss weight"):
        TrainConfig(regression_weight=0.0, cross_entropy_weight=0.0)
    TrainConfig(regression_weight=0.0, cross_entropy_weight=1.0)  # cross-entropy alone is fine


def test_unroll_step_weights():
    """One weight per unroll step, decaying geometrically; one step by default."""
    assert TrainConfig().step_weights == (1.0,)
    assert TrainConfig(unroll_steps=3).step_weights == (1.0, 1.0, 1.0)
    assert TrainConfig(unroll_steps=3, unroll_decay=0.5).step_weights == (1.0, 0.5, 0.25)


def test_variant_defaults_and_checks():
    """EAGLE-1 by default with its weights; for_variant starts from each variant's weights
    unless given; an EAGLE-3 regression or an unknown variant is refused."""
    assert (TrainConfig().variant, TrainConfig().regression_weight) == ("eagle1", 1.0)
    eagle1 = TrainConfig.for_variant("eagle1", steps=10)
    assert (eagle1.regression_weight, eagle1.cross_entropy_weight, eagle1.steps) == (1.0, 0.1, 10)
    eagle3 = TrainConfig.for_variant("eagle3")
    assert (eagle3.variant, eagle3.regression_weight, eagle3.cross_entropy_weight) == (
        "eagle3", 0.0, 1.0)
    assert TrainConfig.for_variant("eagle3", cross_entropy_weight=0.5).cross_entropy_weight == 0.5
    with pytest.raises(ValueError, match="distribution alone"):
        TrainConfig(variant="eagle3")
    with pytest.raises(ValueError, match="eagle1, eagle3"):
        TrainConfig(variant="eagle2")
