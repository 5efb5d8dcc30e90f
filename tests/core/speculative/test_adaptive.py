"""The adaptive depth controller (``spec/adaptive.py``): the closed-form acceptance it rates
depths by, and its bookkeeping: the warm-up plan, outliers left out (and for how long), a
seeded bucket's check of its first sample, a planned iteration repeated, a lone candidate.

Checked against closed-form acceptance and a simulated cost: the closed form against a
brute-force simulated chain walk; the bookkeeping against the depths and estimates its
rules give, written out, on the simulated device of ``adaptive_cost_models``. How the
controller converges on simulated cost models is in ``test_adaptive_convergence.py``.
"""

from __future__ import annotations

import random

import pytest
from adaptive_cost_models import CANDIDATES, _CostModel, _drive, _simulated_chain_accept
from eagle_hal.speculative.adaptive import AdaptiveController
from eagle_hal.speculative.chain_acceptance import expected_accept_length, infer_acceptance_rate


@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 0.95])
@pytest.mark.parametrize("steps", [1, 3, 6])
def test_expected_accept_length_matches_simulation(alpha: float, steps: int) -> None:
    """The closed form equals the mean of a simulated chain walk (5 sigma bound)."""
    rng = random.Random(1234)
    samples = [_simulated_chain_accept(alpha, steps, rng) for _ in range(20000)]
    mean = sum(samples) / len(samples)
    var = sum((x - mean) ** 2 for x in samples) / len(samples)
    assert (abs(mean - expected_accept_length(alpha, steps))
            <= 5 * (var / len(samples)) ** 0.5 + 1e-9)


@pytest.mark.parametrize("alpha", [0.05, 0.5, 0.9])
def test_infer_acceptance_rate_inverts(alpha: float) -> None:
    """Inference recovers alpha from an exact accept length; S = 0 carries no information."""
    assert infer_acceptance_rate(expected_accept_length(alpha, 4), 4) == pytest.approx(
        alpha, abs=1e-6
    )
    assert infer_acceptance_rate(1.0, 0) is None


def test_warmup_measures_every_candidate_deepest_first() -> None:
    """A new bucket runs each candidate (deepest first) before settling."""
    controller = AdaptiveController((0, 2, 4), warmup_iterations=2)
    chosen = []
    for _ in range(9):
        steps = controller.choose(1)
        chosen.append(steps)
        assert controller.settled(1) is None
        controller.observe(1, steps, 1.0, 1e-3 * (1 + steps))
    assert chosen == [4, 4, 4, 2, 2, 2, 0, 0, 0]
    assert controller.settled(1) == 0


def test_outliers_are_left_out_at_most_max_rejected_in_a_row() -> None:
    """A depth that really became slower (every iteration 10x) is believed after
    ``max_rejected`` left-out samples: its estimate follows; the two before leave it
    exactly as it was."""
    controller = AdaptiveController((0,), max_rejected=2)
    for _ in range(5):
        controller.observe(1, 0, 1.0, 1e-3)

    def rate() -> float:
        (_, rates), = controller.snapshot().values()
        return rates[0]

    before = rate()
    assert before == pytest.approx(1.0 / 1e-3)
    for _ in range(2):
        controller.observe(1, 0, 1.0, 1e-2)
        assert rate() == before  # left out
    controller.observe(1, 0, 1.0, 1e-2)
    assert rate() < before * 0.95  # the third slow sample was folded in


def test_a_bucket_seeded_from_a_neighbour_checks_its_first_sample() -> None:
    """A new bucket starts at its neighbour's depth with no estimate of its own. Its first
    sample (at a new batch size: a capture, a compile) is checked against the depth's
    estimate in the other buckets, scaled by the batch sizes; a normal one is kept."""
    model = _CostModel(1, 0.6, 1e-3, 0.5e-3, 0.5e-3, noise=0.0)
    controller = AdaptiveController(CANDIDATES)
    _drive(controller, model, 1, 200)
    depth = controller.settled(1)
    assert depth is not None
    assert controller.choose(2) == depth
    controller.observe(2, depth, 2.0, 0.5)  # a 0.5 s capture inside the first iteration
    assert controller.snapshot()[2][1][depth] is None  # left out
    controller.observe(2, depth, 2.0, 4e-3)  # 2x batch 1's iteration at most: kept
    assert controller.snapshot()[2][1][depth] == pytest.approx(2.0 / 4e-3)


def test_a_planned_iteration_left_out_runs_again() -> None:
    """A warm-up (or probe) iteration left out as an outlier is repeated, so the depth is
    decided on samples of its own, never on none."""
    controller = AdaptiveController((0, 3), warmup_iterations=2)
    chosen = []
    slow_done = False
    while controller.settled(1) is None:
        steps = controller.choose(1)
        chosen.append(steps)
        seconds = 2e-3 if steps else 1e-3
        if steps == 0 and chosen.count(0) == 2 and not slow_done:  # S = 0's first timed
            seconds, slow_done = 1.0, True
        controller.observe(1, steps, 2.5 if steps else 1.0, seconds)
    assert chosen == [3, 3, 3, 0, 0, 0, 0]  # one more S = 0 than planned
    assert controller.snapshot()[1][1][0] == pytest.approx(1e3)


def test_a_single_candidate_runs_alone_and_never_probes() -> None:
    """``adaptive_steps=(5,)``: nothing to choose between, so no warm-up and no probe (a
    probe with no other depth used to divide by zero at the first probe interval)."""
    controller = AdaptiveController((5,), probe_interval=4)
    model = _CostModel(1, 0.7, 1e-3, 0.1e-3, 0.1e-3)
    assert set(_drive(controller, model, 1, 100)) == {5}


def test_the_switch_log_records_each_change_of_depth_with_its_reason() -> None:
    """Every change of a bucket's settled depth is logged, and only those: the warm-up's
    choice (the cost model's best, brute force), then, after the draft stops matching, the
    move to S = 0 (by a probe of S = 0 or the settled depth measuring below it). The log
    is replayed against the depths ``settled`` reported after each iteration."""
    model = _CostModel(4, 0.85, 1e-3, 0.05e-3, 0.05e-3, noise=0.0)
    warm_best = model.best(CANDIDATES)
    controller = AdaptiveController(CANDIDATES)
    settled = _drive(controller, model, 4, 300)
    model.alpha = 0.0
    assert model.best(CANDIDATES) == 0
    settled += _drive(controller, model, 4, 300)
    changes = [(i + 1, a, b)
               for i, (a, b) in enumerate(zip([None] + settled, settled, strict=False))
               if a != b]
    log = controller.switches()
    assert [(e["iteration"], e["from"], e["to"]) for e in log] == changes
    assert log[0]["reason"] == "warm-up" and log[0]["to"] == warm_best > 0
    assert log[-1]["to"] == 0 and log[-1]["reason"] in ("probe", "slower than S = 0")
    assert all(e["bucket"] == 4 and e["batch_size"] == 4 for e in log)
    assert set(log[-1]["tokens_per_request_s"]) == set(CANDIDATES)
    assert controller.switches(len(log) - 1) == log[-1:]
