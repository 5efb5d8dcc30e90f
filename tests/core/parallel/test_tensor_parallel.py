"""Tensor parallelism over 2 gloo processes on the CPU agrees with one process.

Oracle: the single-process engine over the whole (unsharded) model, whose own losslessness
tests/core/speculative/test_worker.py establishes, and plain decoding (no draft) of that model.
Each scenario (tiny random Llamas, float32, EAGLE chains/trees, sampling, the adaptive
controller) runs once in 2 spawned ranks; the tests read the ranks' results.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.parallel import ParallelContext
from eagle_hal.parallel.checks import DEFAULT_SCENARIOS, run_scenario, run_sharded
from eagle_hal.parallel.launch import RankFailed

SCENARIOS = {s.name: s for s in DEFAULT_SCENARIOS}
GREEDY = [s.name for s in DEFAULT_SCENARIOS if s.params.greedy]
PLAIN_OF = {"near_bigram": "plain", "random": "random_plain"}


@pytest.fixture(scope="module")
def ranks():
    """Every scenario's results on rank 0 and rank 1 (one spawn for the module).

    A rank killed by a signal gets one more spawn: twice in full CPU test runs (before
    commit 316d2aa's barrier, and after it in a clean-clone CI run) a gloo rank aborted
    ("terminate called without an active exception", SIGABRT) and the next run of the same
    tests passed; it has not reproduced alone, 9 runs of this module under load included.
    A rank that raises, or dies twice, still fails every test here."""
    try:
        return run_sharded(DEFAULT_SCENARIOS, world_size=2, device="cpu")
    except RankFailed as error:
        if "signal" not in str(error):
            raise
        return run_sharded(DEFAULT_SCENARIOS, world_size=2, device="cpu")


@pytest.fixture(scope="module")
def single(cpu_backend):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny models; spare the shared cores
    try:
        return {s.name: run_scenario(s, cpu_backend, ParallelContext.single())
                for s in DEFAULT_SCENARIOS}
    finally:
        torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cpu_backend():
    from eagle_hal import select_backend

    return select_backend("cpu")


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_ranks_agree_bit_for_bit(ranks, name):
    """Both ranks emit the same tokens, use the same base seed and see identical logits."""
    assert ranks[0][name] == ranks[1][name]


@pytest.mark.parametrize("name", GREEDY)
def test_greedy_tokens_match_the_single_process_run(ranks, single, name):
    """Greedy, float32: token-identical to the whole model in one process."""
    assert ranks[0][name]["tokens"] == single[name]["tokens"]


@pytest.mark.parametrize("name", [n for n in GREEDY if SCENARIOS[n].draft])
def test_greedy_speculation_is_lossless_against_plain_decoding(ranks, single, name):
    """EAGLE over 2 ranks emits exactly what plain decoding of the whole model emits."""
    plain = single[PLAIN_OF[SCENARIOS[name].target]]
    assert ranks[0][name]["tokens"] == plain["tokens"]


@pytest.mark.parametrize("name", ["plain", "random_plain"])
def test_sharded_logits_equal_whole_model_logits(ranks, single, name):
    """Prompt logits of the sharded model (even and odd, padded, vocabulary) match the
    whole model's to float32 rounding."""
    sharded = torch.tensor(ranks[0][name]["prompt_logits"])
    whole = torch.tensor(single[name]["prompt_logits"])
    assert sharded.shape == whole.shape == (len(SCENARIOS[name].prompts[0]), SCENARIOS[name].vocab)
    torch.testing.assert_close(sharded, whole, rtol=1e-5, atol=1e-5)


def test_sampling_with_an_unseeded_worker_is_identical_across_ranks(ranks):
    """T > 0 and no seed given: each rank draws its own base seed, rank 0's is broadcast,
    and both ranks sample the same tokens (the documented rule)."""
    scenario = SCENARIOS["sampled"]
    assert scenario.worker_seed is None and not scenario.params.greedy
    assert ranks[0]["sampled"]["base_seed"] == ranks[1]["sampled"]["base_seed"]
    assert ranks[0]["sampled"]["tokens"] == ranks[1]["sampled"]["tokens"]
    lengths = [len(t) for t in ranks[0]["sampled"]["tokens"]]
    assert lengths == [scenario.params.max_new_tokens] * len(scenario.prompts)


def test_adaptive_controller_keeps_ranks_in_step(ranks):
    """The controller times iterations (which differ per rank); rank 0's choice of draft
    steps is broadcast, so sampled adaptive runs finish with identical tokens."""
    assert ranks[0]["adaptive"]["tokens"] == ranks[1]["adaptive"]["tokens"]
    assert all(len(t) == 24 for t in ranks[0]["adaptive"]["tokens"])
