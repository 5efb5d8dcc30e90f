"""Tests for the real-size benchmark pieces on the CPU: the published shapes with random
weights (``model.random_targets``), oracle acceptance (``speculative.oracle_accept``), the
bandwidth byte count (``commands.bench_bandwidth``) and ``eagle-hal bench --random-target``.

Oracles: the published parameter counts of the named models; a brute-force sum over the
built model's own parameters and projection shapes; emitted tokens counted against the
iterations that emitted them; a Python walk of each verified tree's links for its depth.
"""

from __future__ import annotations

import json

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.cli import main
from eagle_hal.commands.bench_bandwidth import kv_bytes_per_token, step_bytes, weight_bytes
from eagle_hal.commands.bench_config import BenchConfig
from eagle_hal.engine.request import SamplingParams
from eagle_hal.model.random_targets import (
    SHAPES,
    build_random_models,
    random_target,
    shape_config,
)
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.oracle_accept import OracleAccept


def test_published_shapes_have_the_published_sizes():
    """Parameter counts as the model cards state them (8.03B, 1.24B, 8.19B); Qwen3 has its
    q/k norm, Llama 3.x its llama3 rotary scaling, the 1B its tied embeddings."""
    sizes = {"llama-3.1-8b": 8.03e9, "llama-3.2-1b": 1.236e9, "qwen3-8b": 8.19e9}
    for name, size in sizes.items():
        assert shape_config(name).num_parameters == pytest.approx(size, rel=2e-3)
    assert shape_config("qwen3-8b").qk_norm and not shape_config("llama-3.1-8b").qk_norm
    assert shape_config("llama-3.1-8b").rope_scaling.factor == 8.0
    assert shape_config("llama-3.2-1b").tie_word_embeddings
    assert all(shape_config(name).eos_token_ids == () for name in SHAPES)
    with pytest.raises(KeyError, match="known: llama-3.1-8b"):
        shape_config("llama-9")


def test_random_models_are_built_in_the_dtype_with_the_head_geometry():
    target, head = build_random_models("tiny", "cpu", torch.bfloat16)
    assert {p.dtype for p in [*target.parameters(), *head.parameters()]} == {torch.bfloat16}
    assert all(torch.isfinite(p.float()).all() for p in target.parameters())
    assert head.draft_vocab_size == 256 and head.lm_head.weight.shape == (256, 64)
    assert head.fc.weight.shape == (64, 3 * 64) and len(head.aux_layers) == 3
    assert int(head.t2d.sum()) == 256


@pytest.mark.parametrize("tied", [False, True])
def test_the_step_byte_count_is_the_sum_over_the_parameters_and_the_kv(tied):
    """Every parameter once (a tied table once, as the lm_head reads it), of the embedding
    only the batch's rows; K/V from the projections' own output widths."""
    raw = {**SHAPES["tiny"], "tie_word_embeddings": tied}
    config = shape_config(raw)
    model = random_target(config, "cpu", torch.bfloat16)
    size = 2
    table = model.model.embed_tokens.weight
    brute = sum(p.numel() for p in model.parameters()) * size  # parameters() dedups a tie
    if not tied:
        brute -= table.numel() * size
    batch = 3
    brute += batch * table.shape[1] * size
    assert weight_bytes(config, size, batch) == brute
    per_token = sum(2 * layer.self_attn.k_proj.weight.shape[0] * size
                    for layer in model.model.layers)
    assert kv_bytes_per_token(config, size) == per_token
    assert step_bytes(config, size, [10, 20, 30]) == brute + 60 * per_token


def _oracle_llm(spec, tau, seed=0):
    target, head = build_random_models("tiny", "cpu", torch.float32, seed=seed)
    llm = LLM.from_models(select_backend("cpu"), target, head, spec=spec, max_batch_size=2,
                          max_context=512)
    llm.worker.accept_by_oracle(OracleAccept(tau))
    return llm


@pytest.mark.parametrize("tau", [1, 2, 4])
def test_a_chain_under_the_oracle_emits_tau_tokens_per_iteration(tau):
    """Counted independently: a request of 1 + tau * k tokens (the first from its prefill)
    takes exactly k verify passes, and the worker ran k iterations at depth 3."""
    llm = _oracle_llm(SpecConfig().with_settings(3, 1, 4), tau)
    k = 5
    outputs = llm.generate([[1, 2, 3, 4, 5]], SamplingParams(max_tokens=1 + tau * k))
    assert outputs[0].num_tokens == 1 + tau * k
    assert outputs[0].stats.verify_steps == k
    assert llm.worker.iterations_at_depth[3] == k


def _depth(next_token, next_sibling):
    """The deepest level of a tree, walked from its links in Python."""
    def walk(node, level):
        deepest, child = level, next_token[node]
        while child >= 0:
            deepest = max(deepest, walk(child, level + 1))
            child = next_sibling[child]
        return deepest
    return walk(0, 0)


def test_a_tree_under_the_oracle_keeps_its_shape_and_accepts_down_one_path(monkeypatch):
    """Every verified tree has N nodes, siblings distinct; each verify accepts
    min(tau - 1, the tree's depth) drafts along parent links; the tokens emitted add up."""
    tau, steps = 3, 3
    llm = _oracle_llm(SpecConfig().with_settings(steps, 2, 6), tau, seed=3)
    ops = llm.worker.context.ops
    seen = []
    real = type(ops).verify_greedy

    def spy(self, tokens, next_token, next_sibling, predict, num_steps):
        result = real(self, tokens, next_token, next_sibling, predict, num_steps)
        seen.append((tokens.tolist(), next_token.tolist(), next_sibling.tolist(),
                     result.accepted_nodes.tolist(), result.accept_lens.tolist()))
        return result

    monkeypatch.setattr(type(ops), "verify_greedy", spy)
    outputs = llm.generate([[1, 2, 3, 4, 5], [9, 8, 7]], SamplingParams(max_tokens=40))
    assert seen
    emitted = 0
    for tokens, next_token, next_sibling, accepted, lens in seen:
        for b in range(len(tokens)):
            assert len(tokens[b]) == 6
            for node in range(6):  # each node's children: distinct tokens of its top-K
                children, child = [], next_token[b][node]
                while child >= 0:
                    children.append(tokens[b][child])
                    child = next_sibling[b][child]
                assert len(children) == len(set(children)) <= 2
            want = min(tau - 1, _depth(next_token[b], next_sibling[b])) + 1
            assert lens[b] == want
            path = accepted[b][:want]
            for parent, node in zip(path, path[1:], strict=False):  # each a child of the last
                child = next_token[b][parent]
                kids = []
                while child >= 0:
                    kids.append(child)
                    child = next_sibling[b][child]
                assert node in kids
            assert all(n == -1 for n in accepted[b][want:])
            emitted += want
    # every verify's tokens reached the requests but the last, cut at max_tokens
    assert sum(o.num_tokens - 1 for o in outputs) <= emitted
    assert emitted - sum(o.num_tokens - 1 for o in outputs) < 2 * tau


def test_the_oracle_is_only_taken_explicitly_and_before_any_decode():
    llm = _oracle_llm(SpecConfig().with_settings(2, 1, 3), 2)
    with pytest.raises(TypeError):
        llm.worker.accept_by_oracle(2)
    with pytest.raises(ValueError):
        OracleAccept(0)


def test_bench_modes_take_an_oracle_accept_length_for_chains_and_trees_only():
    config = BenchConfig(modes=("plain", "chain:S5T4", "tree:S5K4N32T6"))
    assert [config.oracle_for(m) for m in config.modes] == [None, 4, 6]
    assert config.spec_for("tree:S5K4N32T6").draft_tokens == 32
    for bad, message in (("chain:S5T7", r"\[1, 6\]"), ("plain:T2", "chain's or a tree's"),
                         ("adaptive:T3", "chain's or a tree's")):
        with pytest.raises(ValueError, match=message):
            BenchConfig(modes=(bad,))


def test_an_unknown_random_target_is_refused_with_the_known_names(capsys):
    assert main(["bench", "--random-target", "llama-9b", "--device", "cpu"]) == 2
    err = capsys.readouterr().err
    assert "unknown random target 'llama-9b'" in err
    assert all(name in err for name in ("llama-3.1-8b", "llama-3.2-1b", "qwen3-8b"))


def test_bench_random_target_runs_on_the_cpu_and_ends_with_a_table(tmp_path, capsys):
    out = tmp_path / "bench"
    status = main(["bench", "--random-target", "tiny", "--device", "cpu",
                   "--modes", "plain,chain:S3T3", "--num-prompts", "1", "--max-tokens", "10",
                   "--prompt-tokens", "12", "--repeats", "1", "--copy-test-mib", "4",
                   "--out", str(out)])
    assert status == 0
    printed = capsys.readouterr().out.strip().splitlines()
    assert printed[0].startswith("random-weight target tiny")
    assert "oracle τ=3 (engine cost, not a speedup)" in printed[4]  # plain on line 3
    assert printed[-1].startswith("| 1 |")  # the bandwidth table's batch-1 line
    report = json.loads((out / "results.json").read_text())
    plain, chain = report["results"]
    assert chain["oracle_accept"] == 3 and "speedup" not in chain
    assert chain["accept_length"] == 3.0  # 9 tokens after the prefill's, 3 a verify
    assert "ratio_at_oracle_accept" in chain and "oracle_accept" not in plain
    bandwidth = plain["bandwidth"]
    assert bandwidth["fraction_of_copy"] > 0 and bandwidth["fraction_of_peak"] is None
    config = shape_config("tiny")
    # the prompt plus half the output, on average over the run
    assert bandwidth["bytes_per_step"] == step_bytes(config, 2, [12 + 10 / 2])
    assert report["config"]["random_target"] == "tiny"
