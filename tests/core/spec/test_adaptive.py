"""The adaptive depth controller, checked against closed-form acceptance and a simulated cost."""

from __future__ import annotations

import random

import pytest

from eagle_hal.spec.adaptive import (
    AdaptiveController,
    expected_accept_length,
    infer_acceptance_rate,
)


def _simulated_chain_accept(alpha: float, steps: int, rng: random.Random) -> int:
    """Brute force: walk a chain, accepting each draft with probability alpha, plus bonus."""
    accepted = 0
    while accepted < steps and rng.random() < alpha:
        accepted += 1
    return accepted + 1


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.95])
@pytest.mark.parametrize("steps", [1, 3, 6])
def test_expected_accept_length_matches_simulation(alpha: float, steps: int) -> None:
    """The closed form equals the mean of a simulated chain walk (5 sigma bound)."""
    rng = random.Random(1234)
    samples = [_simulated_chain_accept(alpha, steps, rng) for _ in range(20000)]
    mean = sum(samples) / len(samples)
    var = sum((x - mean) ** 2 for x in samples) / len(samples)
    assert abs(mean - expected_accept_length(alpha, steps)) <= 5 * (var / len(samples)) ** 0.5 + 1e-9


@pytest.mark.parametrize("alpha", [0.05, 0.5, 0.9])
def test_infer_acceptance_rate_inverts(alpha: float) -> None:
    """Inference recovers alpha from an exact accept length; S = 0 carries no information."""
    assert infer_acceptance_rate(expected_accept_length(alpha, 4), 4) == pytest.approx(alpha, abs=1e-6)
    assert infer_acceptance_rate(1.0, 0) is None


def _run(controller: AdaptiveController, alpha: float, verify: float, draft: float, iters: int) -> int:
    rng = random.Random(7)
    steps = controller.choose(1)
    for _ in range(iters):
        steps = controller.choose(1)
        accept = _simulated_chain_accept(alpha, steps, rng)
        controller.observe(1, steps, accept, verify + steps * draft)
    return controller.choose(1)


def test_turns_speculation_off_when_it_does_not_pay() -> None:
    """A useless draft (alpha ~ 0) with a real cost drives S to 0."""
    controller = AdaptiveController((0, 1, 3, 5), probe_interval=10_000)
    assert _run(controller, alpha=0.02, verify=1.0, draft=0.3, iters=200) == 0


def test_keeps_deep_speculation_when_it_pays() -> None:
    """A good, cheap draft keeps the deepest candidate (brute-force best by simulation)."""
    controller = AdaptiveController((0, 1, 3, 5))
    best = max((0, 1, 3, 5), key=lambda s: expected_accept_length(0.85, s) / (1.0 + 0.05 * s))
    assert _run(controller, alpha=0.85, verify=1.0, draft=0.05, iters=200) == best == 5


def test_probes_again_from_zero() -> None:
    """At S = 0 the controller re-tries a positive depth every probe_interval iterations."""
    controller = AdaptiveController((0, 2), initial_steps=0, probe_interval=5)
    chosen = [controller.choose(1) for _ in range(10)]
    assert chosen.count(2) == 2


def test_buckets_are_independent() -> None:
    """Observations at batch size 64 do not move the depth used at batch size 1."""
    controller = AdaptiveController((0, 4), probe_interval=10_000)
    for _ in range(50):
        controller.observe(64, 4, 1.0, 10.0)
    controller.observe(64, 0, 1.0, 1.0)
    for _ in range(10):
        controller.observe(64, 0, 1.0, 1.0)
    assert controller.choose(64) == 0
    assert controller.choose(1) == 4
