"""Tests for ``eagle-hal bench`` (eagle_hal.commands.bench) on CPU with tiny models.

Oracles: the prompt files' own contents; greedy plain decoding (speculative rows must
reproduce its tokens: ``same_as_plain``); arithmetic identities of the reported figures.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.commands import bench, bench_warmup
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

MTBENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "mt_bench_question.jsonl"


def test_prompts_from_jsonl_and_text(tmp_path):
    """JSONL first turns (or 'prompt'), text lines; num_prompts truncates."""
    jsonl = tmp_path / "q.jsonl"
    jsonl.write_text('{"turns": ["a?", "b?"]}\n{"prompt": "c"}\n\n{"text": "d"}\n')
    assert bench.load_prompts(str(jsonl), 10) == ["a?", "c", "d"]
    text = tmp_path / "q.txt"
    text.write_text("one\n\ntwo\nthree\n")
    assert bench.load_prompts(str(text), 2) == ["one", "two"]


def test_mt_bench_file_gives_first_turns():
    """The repository's MT-bench question file: 80 questions, first turns."""
    prompts = bench.load_prompts(str(MTBENCH), 100)
    first = json.loads(MTBENCH.read_text().splitlines()[0])
    assert len(prompts) == 80 and prompts[0] == first["turns"][0]


def test_bad_dataset_and_modes_are_reported(tmp_path, capsys):
    """A missing file or an unknown mode exits 2 with a message, loading nothing."""
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    args = parser.parse_args(["--dataset", str(tmp_path / "missing.jsonl")])
    assert bench.run(args) == 2 and "cannot read --dataset" in capsys.readouterr().err
    args = parser.parse_args(["--modes", "plain,fast", "--dataset", str(MTBENCH)])
    assert bench.run(args) == 2 and "unknown modes ['fast']" in capsys.readouterr().err


def test_benchmark_rows_and_results(tmp_path):
    """Every (mode, batch) row is reported; speculation reproduces plain decoding; the
    per-iteration split adds up; results.json (and plots when possible) are written."""
    target = near_bigram_target(seed=5)
    draft = matching_eagle1(target, noise=0.02)
    config = bench.BenchConfig(batch_sizes=(1, 2), max_new_tokens=8, steps=2, topk=2,
                               draft_tokens=4)
    prompts = [[1, 2, 3], [7, 8, 9, 10], [20, 21]]
    rows = bench.benchmark(select_backend("cpu"), target, draft, prompts, config)
    assert [(r["mode"], r["batch_size"]) for r in rows] == [
        (m, b) for b in (1, 2) for m in bench.MODES]
    for row in rows:
        assert row["output_tokens"] == 8 * len(prompts)
        assert row["same_as_plain"] and row["speedup"] > 0
        phases = row["iteration_ms"]
        total = (phases["draft"] + phases["verify"] + phases["accept"] + phases["draft_extend"]
                 + phases["catch_up"] + phases["other"])
        assert phases["total"] == pytest.approx(total)
        # the time ledger: every token of the timed runs on some account (3 runs, 8 new
        # tokens a prompt, the first of each from its prefill), batches within their size,
        # depths among those the mode runs, and the periods within the runs' wall time
        ledger = row["time_by_batch"]
        prefill, decode = ledger["prefill"], ledger["decode"]
        assert sum(a["tokens"] for a in prefill.values()) == 3 * len(prompts)
        assert sum(a["tokens"] for a in decode.values()) == 3 * 7 * len(prompts)
        assert {int(b) for b in decode} <= {1, 2} and max(map(int, decode)) <= row["batch_size"]
        depths = {int(d) for a in decode.values() for d in a["by_depth"]}
        spec = config.spec_for(row["mode"])
        runs = {0} if row["mode"] == "plain" else (
            set(spec.adaptive_steps) if spec.adaptive else {spec.num_steps})
        assert depths and depths <= runs, (row["mode"], depths, runs)
        spent = sum(a["seconds"] for kind in (prefill, decode) for a in kind.values())
        wall = sum(row["output_tokens"] / rate for rate in row["tokens_per_s_runs"])
        assert 0.5 * wall < spent <= wall  # up to each run's last step
    plain = [r for r in rows if r["mode"] == "plain"]
    assert all(r["accept_length"] == 1.0 and r["speedup"] == 1.0 for r in plain)
    assert all(r["accept_length"] > 1.5 for r in rows if r["mode"] in ("chain", "tree"))
    report = {"config": {"batch_sizes": [1, 2]}, "results": rows}
    written = bench.write_results(tmp_path, report)
    assert json.loads((tmp_path / "results.json").read_text())["results"][0]["mode"] == "plain"
    assert all(path.exists() for path in written)


def test_modes_are_warmed_up_first_then_their_timed_runs_interleaved(monkeypatch):
    """Every mode of a batch size is built and warmed up before any timed run, and the
    timed runs go round the modes (plain, chain, tree, plain, ...), so that a machine
    whose speed drifts weighs on every mode alike; each row keeps its own runs."""
    events = []
    init, run_once = bench._Measurement.__init__, bench._Measurement.run_once

    def recording_init(self, llm, *args):
        init(self, llm, *args)
        events.append(("warm", "plain" if llm.runner.draft is None else llm.worker.spec.topk))

    def recording_run(self):
        events.append(("run", "plain" if self.llm.runner.draft is None
                       else self.llm.worker.spec.topk))
        return run_once(self)

    monkeypatch.setattr(bench._Measurement, "__init__", recording_init)
    monkeypatch.setattr(bench._Measurement, "run_once", recording_run)
    target = near_bigram_target(seed=5)
    config = bench.BenchConfig(modes=("plain", "chain", "tree"), batch_sizes=(1,),
                               max_new_tokens=6, steps=2, topk=2, draft_tokens=4, repeats=3,
                               split_timing=False)
    rows = bench.benchmark(select_backend("cpu"), target, matching_eagle1(target, noise=0.02),
                           [[1, 2, 3], [7, 8, 9]], config)
    order = ["plain", 1, 2]
    assert events == [("warm", m) for m in order] + [("run", m) for m in order] * 3
    assert [len(r["tokens_per_s_runs"]) for r in rows] == [3, 3, 3]
    assert all(r["same_as_plain"] for r in rows)


def test_match_with_plain_counts_identical_outputs_and_the_common_prefix() -> None:
    from eagle_hal.commands.bench import match_with_plain

    plain = [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert match_with_plain(plain, plain) == {"identical_outputs": 1.0, "prefix_tokens": 1.0}
    # second output diverges at its third token (later agreement does not count)
    got = match_with_plain([[1, 2, 3, 4], [5, 6, 9, 8]], plain)
    assert got == {"identical_outputs": 0.5, "prefix_tokens": 6 / 8}


@pytest.mark.parametrize("mode", ["plain", "chain", "adaptive"])
def test_repeated_timed_runs_report_their_median_and_the_depths_run(mode):
    """Three timed runs: tokens/s is the median of the runs' (oracle: each timed call timed
    from outside), every run is kept; the per-depth iteration counts equal the decode
    iterations counted around the worker (a wrapper on ``worker.decode`` over the timed
    runs only); the warm-up leaves no capture to the timed runs."""
    import statistics
    import time
    from collections import Counter

    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.testing.graphs import replaying_cpu_backend

    backend = replaying_cpu_backend()
    target = near_bigram_target(seed=5)
    draft = None if mode == "plain" else matching_eagle1(target, noise=0.02)
    config = bench.BenchConfig(batch_sizes=(2,), max_new_tokens=6, steps=2, topk=2,
                               draft_tokens=4, repeats=3)
    llm = LLM.from_models(backend, target, draft, spec=config.spec_for(mode),
                          max_batch_size=2, max_context=256, seed=0)
    assert llm.runner.enable_graphs()
    prompts = [[1, 2, 3], [7, 8, 9, 10], [20, 21]]
    worker, depths, generations = llm.worker, [], []
    decode, generate, stream = worker.decode, llm.generate, llm.stream

    settled_changes = []  # (bucket, before, after) of the controller across timed calls

    def counting_decode(requests):
        if not generations[-1]:  # the warm-up passes other prompt lists
            return decode(requests)
        depths.append(worker.steps_for(len(requests)))
        controller = worker.controller
        before = controller and {b: s for b, (s, _) in controller.snapshot().items()}
        emitted = decode(requests)
        if controller:
            after = {b: s for b, (s, _) in controller.snapshot().items()}
            settled_changes.extend((b, before.get(b), s) for b, s in after.items()
                                   if before.get(b) != s)
        return emitted

    timed = []  # (tokens, seconds) of each timed run, measured around the bench's call

    def counting_generate(batch, params):  # the warm-up's way in
        generations.append(batch is prompts)
        return generate(batch, params)

    def counting_stream(batch, params):  # the timed runs' way in
        generations.append(batch is prompts)
        start = time.perf_counter()
        yield from stream(batch, params)
        if batch is prompts:
            timed.append((sum(o.num_tokens for o in llm.last_outputs),
                          time.perf_counter() - start))

    worker.decode, llm.generate, llm.stream = counting_decode, counting_generate, counting_stream
    row = bench._measure(llm, prompts, SamplingParams(max_new_tokens=6), 2, split=False,
                         repeats=3)
    runs = row["tokens_per_s_runs"]
    assert generations.count(True) == 3 and len(runs) == 3
    assert runs == pytest.approx([n / t for n, t in timed], rel=0.05)
    assert row["tokens_per_s"] == pytest.approx(statistics.median(n / t for n, t in timed),
                                                rel=0.05)
    assert row["output_tokens"] == 6 * len(prompts)
    assert row["captures_while_timed"] == 0
    got = {int(s): n for s, n in row["iterations_at_depth"].items()}
    assert sum(got.values()) > 0
    if mode == "plain":
        assert set(got) == {0}
    elif mode == "chain":
        assert set(got) == {2}
    assert got == dict(Counter(depths))
    if mode == "adaptive":  # every change of depth while timed, logged with its reason
        switches = row["controller_switches"]
        assert [(e["bucket"], e["from"], e["to"]) for e in switches] == settled_changes
        assert all(e["reason"] in ("warm-up", "probe", "recheck", "slower than S = 0")
                   for e in switches)
    else:
        assert "controller_switches" not in row


def test_timed_catch_ups_are_reported():
    """An adaptive row reports the draft's catch-ups over the timed runs and the tokens
    they covered (oracle: a wrapper on ``worker.draft.catch_up`` counting the calls that caught
    up during the timed runs, and the lags it saw), and ``catch_up`` in the split. A
    scripted, timing-free controller returns to S > 0 every fourth iteration."""
    import itertools

    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams

    class Scripted:
        bucket_sizes = (1, 2)

        def __init__(self) -> None:
            self._depths = itertools.cycle((0, 0, 0, 3))

        def choose(self, batch_size):
            return next(self._depths)

        def observe(self, *args, **kwargs):
            pass

        def is_settled(self, batch_size):
            return True

    target = near_bigram_target(seed=5)
    config = bench.BenchConfig(batch_sizes=(2,), max_new_tokens=12, steps=3, topk=2,
                               draft_tokens=4, repeats=2)
    llm = LLM.from_models(select_backend("cpu"), target, matching_eagle1(target, noise=0.02),
                          spec=config.spec_for("adaptive"), max_batch_size=2, seed=0)
    prompts = [[1, 2, 3], [7, 8, 9, 10], [20, 21]]
    worker, timed, seen = llm.worker, [], [0, 0]
    worker.controller = Scripted()
    catch_up, generate, stream = worker.draft.catch_up, llm.generate, llm.stream

    def counting_catch_up(requests):
        lags = sum(worker.draft.pending.lag(r.request_id) for r in requests)
        caught = catch_up(requests)
        if timed[-1] and caught:
            seen[0], seen[1] = seen[0] + 1, seen[1] + lags
        return caught

    def marking_generate(batch, params):  # the warm-up and the split pass
        timed.append(False)
        return generate(batch, params)

    def marking_stream(batch, params):  # the timed runs
        timed.append(batch is prompts)
        yield from stream(batch, params)

    worker.draft.catch_up, llm.generate, llm.stream = (counting_catch_up, marking_generate,
                                                      marking_stream)
    row = bench._measure(llm, prompts, SamplingParams(max_new_tokens=12), 2, split=True,
                         repeats=2)
    assert seen[0] > 0
    assert (row["catch_ups_while_timed"], row["catch_up_tokens_while_timed"]) == tuple(seen)
    assert row["iteration_ms"]["catch_up"] > 0
    assert "kernel_compiles_while_timed" in row
    assert len(row["kernels_compiled_while_timed"]) == (row["kernel_compiles_while_timed"] or 0)


def test_kernel_compiles_are_counted_and_named_then_the_hook_restored():
    """Triton's post-compile hook, called as Triton calls it, is counted with its kernel."""
    triton = pytest.importorskip("triton")
    knobs = getattr(getattr(triton, "knobs", None), "runtime", None)
    if knobs is None or not hasattr(knobs, "jit_post_compile_hook"):
        pytest.skip("this Triton has no post-compile hook")
    seen = []
    before = knobs.jit_post_compile_hook

    def mine(**kwargs):
        seen.append(kwargs["repr"])

    knobs.jit_post_compile_hook = mine
    try:
        with bench_warmup.KernelCompiles() as compiles:
            for name in ("attend[num_warps=4](T: i32)", "merge[num_warps=1](T: i32)"):
                knobs.jit_post_compile_hook(key=(), repr=name, fn=None, compile={},
                                            is_manual_warmup=False, already_compiled=False)
        assert compiles.count == 2
        assert compiles.kernels == ["attend[num_warps=4](T: i32)", "merge[num_warps=1](T: i32)"]
        assert seen == compiles.kernels  # the hook already set still ran
        assert knobs.jit_post_compile_hook is mine  # and is back in place
    finally:
        knobs.jit_post_compile_hook = before


def test_modes_with_their_own_draft_vocabularies_run_side_by_side(tmp_path):
    """The same chain over the whole vocabulary and over the ranking's 20 most frequent
    tokens, in one run: each row records the size it drafted from (oracle: the target's
    vocabulary and the V asked for), every row reproduces plain decoding, and 20 tokens
    accept less."""
    from eagle_hal.model.draft_vocab import DraftVocabulary

    target = near_bigram_target(seed=5)
    counts = torch.arange(target.config.vocab_size, 0, -1)  # token 0 the most frequent
    DraftVocabulary.from_counts(counts, coverage=1.0).save(tmp_path)
    modes = ("plain", "chain:S3", "chain:S3V20", "chain:S3Vfull")
    with pytest.raises(ValueError, match="settings must read"):
        bench.BenchConfig(modes=modes)
    modes = ("plain", "chain:S3", "chain:S3V20")
    config = bench.BenchConfig(modes=modes, batch_sizes=(1,), max_new_tokens=10, repeats=1,
                               split_timing=False, draft_vocab="full")
    prompts = [[1, 2, 3], [7, 8, 9], [30, 31]]
    rows = bench.benchmark(select_backend("cpu"), target, matching_eagle1(target, noise=0.02),
                           prompts, config, draft_dir=tmp_path)
    sizes = {r["mode"]: r["draft_vocab_size"] for r in rows}
    assert sizes == {"plain": None, "chain:S3": 61, "chain:S3V20": 20}
    assert all(r["same_as_plain"] for r in rows)
    assert rows[2]["accept_length"] < rows[1]["accept_length"]


def test_modes_with_their_own_settings_run_as_given_next_to_plain():
    """Two trees of different depths, a chain, and plain listed after them: each row runs
    its own settings (oracle: the depths the worker ran; the verify passes of a chain of S
    never accept more than S + 1 tokens), reproduces plain decoding, and gets a speedup
    over plain although plain was measured last."""
    target = near_bigram_target(seed=5)
    modes = ("chain:S3", "tree:S2K2N4", "tree:S3K2N6", "plain")
    config = bench.BenchConfig(modes=modes, batch_sizes=(1,), max_new_tokens=10, steps=5,
                               topk=4, draft_tokens=16, repeats=1, split_timing=False)
    rows = bench.benchmark(select_backend("cpu"), target, matching_eagle1(target, noise=0.02),
                           [[1, 2, 3], [7, 8, 9]], config)
    assert [r["mode"] for r in rows] == list(modes)
    expected = {"chain:S3": (3, 1, 4), "tree:S2K2N4": (2, 2, 4), "tree:S3K2N6": (3, 2, 6),
                "plain": (0, 1, 1)}
    for row in rows:
        spec = row["spec"]
        assert (spec["steps"], spec["topk"], spec["draft_tokens"]) == expected[row["mode"]]
        assert set(row["iterations_at_depth"]) == {str(spec["steps"])}
        assert row["same_as_plain"] and "speedup" in row
    chain = rows[0]
    assert 1.0 < chain["accept_length"] <= 4.0


def test_a_long_timed_run_says_how_many_prompts_have_finished(monkeypatch, capsys):
    """With the progress interval at zero every finished prompt but the last is reported,
    counted in order (oracle: the number of prompts); the outputs are still every prompt's."""
    monkeypatch.setattr(bench, "PROGRESS_EVERY_S", 0.0)
    target = near_bigram_target(seed=5)
    config = bench.BenchConfig(modes=("plain",), batch_sizes=(1,), max_new_tokens=4,
                               repeats=1, split_timing=False)
    prompts = [[1, 2, 3], [7, 8, 9], [20, 21], [5, 6]]
    rows = bench.benchmark(select_backend("cpu"), target, None, prompts, config)
    said = [line for line in capsys.readouterr().err.splitlines() if "prompts done" in line]
    assert [line.split()[0] for line in said] == ["1/4", "2/4", "3/4"]
    assert rows[0]["output_tokens"] == 4 * len(prompts)


def test_an_adaptive_row_records_its_verify_budget_and_the_shapes_it_ran():
    """An adaptive row carries its spec's verify budget and, per batch bucket, the [K, N]
    each depth ran at (oracle, by hand: a budget of 8 tokens at bucket 2 leaves S = 1's
    N = 3 and cuts S = 3's N = 6 to 8 // 2 = 4); the tokens are plain decoding's."""
    target = near_bigram_target(seed=5)
    adaptive = SpecConfig(3, 2, 6, adaptive=True, adaptive_steps=(0, 1, 3),
                          adaptive_verify_budget=8)
    config = bench.BenchConfig(modes=("plain", "adaptive"), batch_sizes=(2,), max_new_tokens=10,
                               repeats=1, split_timing=False, base_specs={"adaptive": adaptive})
    rows = bench.benchmark(select_backend("cpu"), target, matching_eagle1(target, noise=0.02),
                           [[1, 2, 3], [7, 8, 9]], config)
    row = rows[1]
    assert row["spec"]["verify_budget"] == 8 and rows[0]["spec"]["verify_budget"] is None
    assert row["controller"]["2"]["shapes"] == {"1": [2, 3], "3": [2, 4]}
    assert row["same_as_plain"]
