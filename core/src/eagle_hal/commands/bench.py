"""``eagle-hal bench``: plain vs speculative decoding, per mode and batch size, in one run.

For every mode (``plain``, ``chain``, ``tree``, ``adaptive``; ``ngram``, prompt lookup with
no head, and ``self``, the target's first layers drafting, when asked for) and batch size
it builds an engine over the same loaded models, warms it up (graph capture included: one short
generation per graph bucket the run passes through as its requests finish, as a server
captures its graphs at start-up; adaptive: until the controller has settled at each of
those sizes, so that the timed run holds no warm-up iteration), then decodes the prompts
``--repeats`` times (default 3) for throughput (output tokens/s of the median run, every
run's kept; accept length), the modes' timed runs interleaved (every mode is built and
warmed up first, then plain, chain, ..., plain, chain, ...), then once more with per-phase
synchronisation for the split of an iteration into draft / verify / accept / draft-extend /
catch-up. Each row also says how many graphs were captured, catch-ups run and Triton
kernels compiled while timed (one-off costs the warm-up missed), how many iterations ran at
each draft depth, and where the timed runs' wall time went (``time_by_batch``: seconds,
tokens and steps per step kind, batch-size bucket and depth, ``engine.step_ledger``), so
that modes compare bucket by bucket. Speedups are ratios of medians over ``plain`` at the
same batch size in the same run. With ``--hf-baseline`` the same weights also run through
Hugging Face transformers ``generate`` (batch size 1). ``results.json`` and, when
matplotlib is importable, PNG plots go to ``--out``. Prompts (``bench_prompts``):
``--dataset mt-bench`` or a file; first turns go through the chat template.

``--random-target NAME`` measures a published shape instead (``model.random_targets``: the
target and an EAGLE-3 head with random weights, built on the device, no download), over
prompts of random token ids; a mode with an oracle accept length (``chain:S5T4``,
``speculative.oracle_accept``) then says what the engine costs at that accept length,
labelled as such, never as a speedup; plain rows add their memory-bandwidth fraction
(``bench_bandwidth``). The table of the results is printed (``bench_table``).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eagle_hal.commands.bench_bandwidth import copy_bandwidth, decode_bandwidth
from eagle_hal.commands.bench_config import HEADLESS, KINDS, MODES, BenchConfig, mode_spec
from eagle_hal.commands.bench_prompts import load_prompts
from eagle_hal.commands.bench_report import hf_baseline, match_with_plain, write_results
from eagle_hal.commands.bench_table import format_table
from eagle_hal.commands.bench_warmup import KernelCompiles, warm_up
from eagle_hal.commands.generate import POSITIVE, SEED, SPEC_STEPS, draft_vocab_size
from eagle_hal.engine.step_ledger import StepLedger

__all__ = ["BenchConfig", "MODES", "add_arguments", "benchmark", "load_prompts", "mode_spec", "run"]

PROGRESS_EVERY_S = 30.0  # a timed run says how far it is at most this often


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--device", default="auto", help='device string: "cpu", "cuda:0", "auto"')
    parser.add_argument("--backend", default=None, help="force a backend by name")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--model", default=None,
                        help="HF directory, GGUF file or hub id org/name[@revision] "
                             "(default: SmolLM2)")
    parser.add_argument("--draft", default="default",
                        help='EAGLE head directory or hub id, or "default"')
    parser.add_argument("--draft-vocab", default="auto", type=draft_vocab_size,
                        help='tokens the head drafts from unless a mode names its V: "auto" (the '
                        'backend\'s choice: "default" on the CPU, "full" elsewhere), "default", '
                        '"full" or the N most frequent')
    parser.add_argument("--dataset", default="mt-bench", help='"mt-bench" or a JSONL/text file')
    parser.add_argument("--num-prompts", type=POSITIVE, default=16)
    parser.add_argument("--max-tokens", "--max-new-tokens", dest="max_tokens", type=POSITIVE,
                        default=256, help="output tokens per prompt (--max-new-tokens: the "
                        "same, its former name)")
    parser.add_argument("--batch-sizes", default=(1,), type=batch_sizes,
                        help="comma-separated, e.g. 1,2,4,8")
    parser.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of "
                        + ",".join(KINDS) + "; each may carry its own spec settings, "
                        "e.g. plain,chain:S5,tree:S8K4N48,chain:S5V8192; ngram drafts by "
                        "prompt lookup with no head, e.g. ngram:S5K2M3 (M the longest "
                        "match); self drafts with the target's first L layers, e.g. "
                        "self:S4L8")
    parser.add_argument("--spec-steps", type=SPEC_STEPS, default=None,
                        help="draft depth S of modes that name none (default: the backend's "
                        "default spec of each mode's kind)")
    parser.add_argument("--spec-topk", type=POSITIVE, default=None,
                        help="branches K for tree/adaptive (default: the backend's)")
    parser.add_argument("--spec-draft-tokens", type=POSITIVE, default=None,
                        help="verify tokens N for tree/adaptive (default: the backend's)")
    parser.add_argument("--no-graphs", action="store_true", help="run every forward eagerly")
    # off by default: the repeats run the same prompts, so a cache would skip the prefills
    # of every repeat after the first, and figures would stop matching runs without it
    parser.add_argument("--prefix-caching", action="store_true",
                        help="keep the prefix cache on (default: off, every prompt computed "
                             "from scratch; with it, each row reports its hits over the timed "
                             "runs)")
    parser.add_argument("--no-split", action="store_true", help="skip the per-phase timing pass")
    parser.add_argument("--repeats", type=POSITIVE, default=3,
                        help="timed runs per mode and batch size; tokens/s is their median")
    parser.add_argument("--hf-baseline", action="store_true",
                        help="also time HF transformers generate on the same weights (batch 1)")
    parser.add_argument("--max-context", type=POSITIVE, default=2048)
    parser.add_argument("--seed", type=SEED, default=0)
    parser.add_argument("--out", type=Path, default=Path("bench-results"))
    parser.add_argument("--random-target", default=None, type=random_target_name,
                        metavar="NAME",
                        help="a published shape with random weights built on the device (no "
                             "download) and an EAGLE-3 head of the published head shape, in "
                             "place of --model/--draft: " + ", ".join(_shape_names()))
    parser.add_argument("--prompt-tokens", type=POSITIVE, default=100,
                        help="--random-target: each prompt's length in random token ids")
    parser.add_argument("--copy-test-mib", type=POSITIVE, default=1024,
                        help="--random-target: the device-to-device copy timed for the "
                             "bandwidth figures, in MiB")
    parser.add_argument("--peak-bandwidth", type=float, default=None, metavar="GB/S",
                        help="--random-target: the device's nominal memory bandwidth in GB/s "
                             "(default: the backend's, where it knows it)")


def _shape_names() -> tuple[str, ...]:
    from eagle_hal.model.random_targets import SHAPES

    return tuple(SHAPES)


def random_target_name(text: str) -> str:
    """``--random-target``'s value: a name of ``model.random_targets.SHAPES``."""
    from eagle_hal.model.random_targets import SHAPES, unknown_shape_message

    if text not in SHAPES:
        raise argparse.ArgumentTypeError(unknown_shape_message(text))
    return text


def batch_sizes(text: str) -> tuple[int, ...]:
    """``--batch-sizes``' value: comma-separated positive integers, at least one."""
    parts = [part for part in text.split(",") if part.strip()]
    if not parts:
        raise argparse.ArgumentTypeError(f"{text!r} names no batch size; write e.g. 1,2,4")
    return tuple(POSITIVE(part) for part in parts)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- measurement ---------------------------------------------------------------------------


class _Measurement:
    """One (mode, batch size) being measured: built warm (``bench_warmup.warm_up``), then
    timed one generation at a time (``run_once``), so that ``benchmark`` can interleave
    the modes' timed runs; ``row`` summarises. Tokens/s is the median of the runs' (each
    run's kept); outputs, token counts and accept figures are the last run's; captures,
    iterations per depth, catch-ups and kernel compiles are summed over the runs."""

    def __init__(self, llm: Any, prompts: list[list[int]], params: Any, batch_size: int) -> None:
        self.llm, self.prompts, self.params = llm, prompts, params
        self.graphs = False  # whether the engine replays device graphs (the caller's to say)
        warm_up(llm, prompts, params, batch_size)
        worker = llm.worker
        graphs = getattr(llm.runner, "graphs", None)
        self.captured_before = graphs.num_graphs if graphs is not None else 0
        self.depths = getattr(worker, "iterations_at_depth", None)
        if self.depths is not None:
            self.depths.clear()
        catch_ups = getattr(worker, "catch_ups", None)
        self.catch_ups_before = dataclasses.replace(catch_ups) if catch_ups is not None else None
        switches = getattr(getattr(worker, "controller", None), "switches", None)
        self.switches_before = len(switches()) if switches is not None else 0
        self.durations: list[float] = []
        self.runs: list[float] = []  # tokens/s of each timed run
        self.outputs: list[Any] = []
        self.compiles: int | None = None
        self.kernels: list[str] = []
        self.ledger = StepLedger()  # the timed runs' time by step kind, batch and depth
        llm.engine.ledger = self.ledger
        self.cache_before = llm.prefix_cache_stats  # the warm-up's lookups are not counted

    def run_once(self) -> float:
        """One timed generation of the prompts; returns its tokens/s. A run longer than
        ``PROGRESS_EVERY_S`` says how many prompts have finished as it goes (checked only
        when one finishes, so the timing pays nothing per iteration)."""
        backend, total = self.llm.backend, len(self.prompts)
        with KernelCompiles() as compiles:
            backend.synchronize()
            start = time.perf_counter()
            self.ledger.start(start)
            said, finished = start, 0
            for delta in self.llm.stream(self.prompts, self.params):
                if delta.finished:
                    finished += 1
                    now = time.perf_counter()
                    if now - said > PROGRESS_EVERY_S and finished < total:
                        _progress(f"  {finished}/{total} prompts done, {now - start:.0f} s")
                        said = now
            self.outputs = self.llm.last_outputs
            backend.synchronize()
            self.durations.append(time.perf_counter() - start)
        if compiles.count is not None:
            self.compiles = (self.compiles or 0) + compiles.count
            self.kernels += compiles.kernels
        tokens = sum(o.num_tokens for o in self.outputs)
        self.runs.append(tokens / max(self.durations[-1], 1e-9))
        return self.runs[-1]

    def row(self, split: bool) -> dict[str, Any]:
        """The row of the timed runs, then (``split``) the per-phase split pass."""
        from eagle_hal.speculative.worker import IterationTimes

        llm, outputs, worker = self.llm, self.outputs, self.llm.worker
        graphs = getattr(llm.runner, "graphs", None)
        catch_ups, before = getattr(worker, "catch_ups", None), self.catch_ups_before
        tokens = sum(o.num_tokens for o in outputs)
        passes = sum(o.stats.verify_steps for o in outputs)
        accepted = sum(o.stats.accepted_tokens for o in outputs)
        row: dict[str, Any] = {
            "tokens_per_s": statistics.median(self.runs),
            "tokens_per_s_runs": list(self.runs),
            "accept_length": accepted / passes if passes else 0.0,
            "output_tokens": tokens, "seconds": statistics.median(self.durations),
            "verify_passes": passes,
            "accept_length_histogram": dict(sorted(Counter(
                round(o.accept_length, 1) for o in outputs).items())),
            # one-off costs the timed runs paid (each capture is milliseconds on a GPU), and
            # the iterations each draft depth ran, both summed over the timed runs
            "captures_while_timed": (graphs.num_graphs if graphs is not None else 0)
            - self.captured_before,
            "iterations_at_depth": {str(s): n for s, n in sorted((self.depths or {}).items())},
            # the draft's catch-ups after stretches at S = 0 (eager ragged draft extends) and
            # the Triton kernels compiled (None: not countable here), both over the timed runs
            "catch_ups_while_timed": catch_ups.catch_ups - before.catch_ups
            if catch_ups is not None and before is not None else 0,
            "catch_up_tokens_while_timed": catch_ups.tokens - before.tokens
            if catch_ups is not None and before is not None else 0,
            "kernel_compiles_while_timed": self.compiles,
            "kernels_compiled_while_timed": list(self.kernels),
            "token_ids": [list(o.token_ids) for o in outputs],
            # the timed runs' wall time, tokens and steps by step kind, batch-size bucket
            # and (decode) draft depth, summed over the runs (``engine.step_ledger``)
            "time_by_batch": self.ledger.summary(),
            # the prefix cache over the timed runs: context tokens looked up, those served
            # from cached pages (prefill skipped), their ratio; None with the cache off
            "prefix_cache": _cache_delta(self.cache_before, llm.prefix_cache_stats),
        }
        snapshot = getattr(getattr(worker, "controller", None), "snapshot", None)
        if snapshot is not None:  # the adaptive mode: per bucket, the depth and its estimates
            # the shape each depth ran at in the bucket: [K, N] (``adaptive_verify_budget``)
            row["controller"] = {
                str(size): {"settled": settled,
                            "tokens_per_request_s": {str(s): r for s, r in rates.items()},
                            "shapes": {str(s): [shape.topk, shape.draft_tokens]
                                       for s in rates if s > 0
                                       for shape in [worker.spec.with_steps(s, size)]}}
                for size, (settled, rates) in snapshot().items()
            }
            # the changes of depth during the timed runs: when, why, on what estimates
            row["controller_switches"] = [
                {**event, "tokens_per_request_s": {
                    str(s): r for s, r in event["tokens_per_request_s"].items()}}
                for event in getattr(worker.controller, "switches", lambda since: [])(
                    self.switches_before)
            ]
        llm.engine.ledger = None  # the split pass is not a timed run
        if split:
            worker.timed, worker.times = True, IterationTimes()
            # its own ledger: the decode steps' wall time, of which the phases are the
            # worker's part and the rest the engine's between two decode calls
            steps = llm.engine.ledger = StepLedger()
            steps.start()
            llm.generate(self.prompts, self.params)
            llm.engine.ledger, worker.timed = None, False
            times = worker.times
            count = max(times.iterations, 1)
            phases = {name: 1e3 * getattr(times, name) / count
                      for name in ("draft", "verify", "accept", "draft_extend", "catch_up",
                                   "other")}
            phases["total"] = sum(phases.values())
            decode = steps.summary().get("decode", {}).values()
            decode_steps = sum(a["steps"] for a in decode)
            phases["engine"] = (1e3 * sum(a["seconds"] for a in decode) / decode_steps
                                - phases["total"]) if decode_steps else 0.0
            phases["step"] = phases["total"] + phases["engine"]
            # what is not a model forward: the accept, the host's preparation and the
            # engine's work between iterations (the draft phase's tree building is not
            # split from its forwards)
            row["outside_forwards"] = (
                (phases["accept"] + phases["other"] + phases["engine"]) / phases["step"]
                if phases["step"] > 0 else None)
            row["iteration_ms"] = phases
            row["overhead_over_verify"] = (
                (phases["draft"] + phases["accept"] + phases["draft_extend"]
                 + phases["catch_up"]) / phases["verify"]
                if phases["verify"] else None
            )
        return row


def _cache_delta(before: dict[str, Any] | None, after: dict[str, Any] | None
                 ) -> dict[str, Any] | None:
    if before is None or after is None:
        return None
    looked = after["lookup_tokens"] - before["lookup_tokens"]
    cached = after["cached_tokens"] - before["cached_tokens"]
    return {"lookup_tokens": looked, "cached_tokens": cached,
            "hit_rate": cached / looked if looked else 0.0}


def _measure(llm: Any, prompts: list[list[int]], params: Any, batch_size: int,
             split: bool, repeats: int = 1) -> dict[str, Any]:
    """Warm ``llm`` up, then time ``repeats`` generations of ``prompts`` (one mode alone;
    ``benchmark`` interleaves the modes' runs instead), then the split pass."""
    measurement = _Measurement(llm, prompts, params, batch_size)
    for _ in range(repeats):
        measurement.run_once()
    return measurement.row(split)


def benchmark(backend: Any, target: Any, draft: Any | None, prompts: Sequence[list[int]],
              config: BenchConfig, *, max_context: int = 2048,
              draft_dir: str | Path | None = None,
              prefix_caching: bool = False) -> list[dict[str, Any]]:
    """Measure every (mode, batch size) of ``config`` over token-id ``prompts``; returns one
    row per pair, in order, with ``speedup`` over ``plain`` at the same batch size (when
    measured) and ``same_as_plain`` (token-for-token equality of the outputs). ``draft``
    drafts from its whole vocabulary; a mode's draft vocabulary comes from ``draft_dir``."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.model.draft_vocab import restrict
    from eagle_hal.speculative.ngram import NgramDrafter
    from eagle_hal.speculative.oracle_accept import OracleAccept
    from eagle_hal.speculative.self_draft import SelfDrafter

    params = SamplingParams(max_tokens=config.max_new_tokens)
    rows: list[dict[str, Any]] = []
    for batch_size in config.batch_sizes:
        # at least one full batch of requests
        batch_prompts = [list(prompts[i % len(prompts)])
                         for i in range(max(len(prompts), batch_size))]
        # plain, ngram and self modes run without a head
        modes = [m for m in config.modes if mode_spec(m)[0] in HEADLESS or draft is not None]
        for mode in config.modes:
            if mode not in modes:
                _progress(f"  skip {mode}: no draft head")
        # every mode built and warmed up first, then their timed runs interleaved (plain,
        # chain, ..., plain, chain, ...): a machine whose speed drifts during the run
        # (shared hosts, clocks) then weighs on every mode alike, not on whichever ran last.
        # The price: every mode's engine (KV cache, graphs) is held at once
        measuring: dict[str, _Measurement] = {}
        for mode in modes:
            _progress(f"bench: warming up {mode}, batch size {batch_size}")
            size = config.draft_vocab_for(mode)
            kind = mode_spec(mode)[0]
            head = None if kind in HEADLESS else restrict(draft, draft_dir, size, backend)
            drafter = NgramDrafter(*config.ngram_for(mode)) if kind == "ngram" else (
                SelfDrafter(config.self_layers_for(mode)) if kind == "self" else None)
            llm = LLM.from_models(
                backend, target, head, spec=config.spec_for(mode), drafter=drafter,
                max_batch_size=batch_size, max_context=max_context, seed=config.seed,
                enable_prefix_caching=prefix_caching,
            )
            tau = config.oracle_for(mode)
            if tau is not None:  # before any graph records the accept
                llm.worker.accept_by_oracle(OracleAccept(tau))
            graphs = config.graphs and llm.runner.enable_graphs()
            measuring[mode] = _Measurement(llm, batch_prompts, params, batch_size)
            measuring[mode].graphs = graphs
        for repeat in range(config.repeats):
            for mode in modes:
                rate = measuring[mode].run_once()
                _progress(f"bench: {mode}, batch size {batch_size}, {len(batch_prompts)} "
                          f"prompts x {config.max_new_tokens} tokens, run {repeat + 1}/"
                          f"{config.repeats}: {rate:.1f} tokens/s")
        batch_rows = []
        for mode in modes:
            measurement = measuring.pop(mode)
            spec = config.spec_for(mode)
            batch_rows.append({"mode": mode, "batch_size": batch_size,
                               "spec": {"steps": spec.num_steps, "topk": spec.topk,
                                        "draft_tokens": spec.draft_tokens,
                                        "adaptive": spec.adaptive,
                                        "verify_budget": spec.adaptive_verify_budget},
                               "draft_vocab_size": measurement.llm.draft_vocab_size,
                               "graphs": measurement.graphs,
                               **_oracle_fields(config.oracle_for(mode)),
                               **measurement.row(config.split_timing)})
            del measurement
        plain = next((r for r in batch_rows if r["mode"] == "plain"), None)
        for row, mode in zip(batch_rows, modes, strict=True):
            if plain is not None and plain["tokens_per_s"] and "oracle_accept" in row:
                # the engine's cost at a forced accept length: never a speedup
                row["ratio_at_oracle_accept"] = row["tokens_per_s"] / plain["tokens_per_s"]
            elif plain is not None and plain["tokens_per_s"]:
                row["speedup"] = row["tokens_per_s"] / plain["tokens_per_s"]
                row["same_as_plain"] = row["token_ids"] == plain["token_ids"]
                row["match_with_plain"] = match_with_plain(row["token_ids"], plain["token_ids"])
            _progress(f"bench: mode {mode}, batch size {batch_size}, {len(batch_prompts)} "
                      f"prompts x {config.max_new_tokens} tokens")
            _progress(f"  {row['tokens_per_s']:.1f} tokens/s (median of {config.repeats}), "
                      f"accept length "
                      f"{row['accept_length']:.2f}" + (f", speedup {row['speedup']:.2f}x"
                                                        if "speedup" in row else ""))
            rows.append(row)
    for row in rows:
        del row["token_ids"]
    return rows


def _oracle_fields(tau: int | None) -> dict[str, Any]:
    """A row's oracle accept length and its label (none without one)."""
    if tau is None:
        return {}
    from eagle_hal.speculative.oracle_accept import OracleAccept

    return {"oracle_accept": tau, "oracle_label": OracleAccept(tau).label(),
            "oracle_note": "the engine's cost at a forced accept length, not an end-to-end "
                           "speedup"}


def run(args: argparse.Namespace) -> int:
    import torch

    from eagle_hal.api import LLM
    from eagle_hal.backends.defaults import SPEC_KINDS
    from eagle_hal.model.draft_vocab import restrict
    from eagle_hal.registry import select_backend

    # the prompts first: a bad --dataset is reported before any backend is probed
    try:
        texts = (load_prompts(args.dataset, args.num_prompts)
                 if getattr(args, "random_target", None) is None else [])
    except ValueError as exc:
        print(f"eagle-hal bench: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    backend = select_backend(args.device, backend=args.backend)
    try:
        config = BenchConfig(
            modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
            batch_sizes=tuple(args.batch_sizes),
            max_new_tokens=args.max_tokens, steps=args.spec_steps, topk=args.spec_topk,
            draft_tokens=args.spec_draft_tokens, graphs=not args.no_graphs,
            split_timing=not args.no_split, repeats=args.repeats, seed=args.seed,
            draft_vocab=args.draft_vocab,
            base_specs={kind: backend.default_spec(kind) for kind in SPEC_KINDS},
        )
    except ValueError as exc:
        print(f"eagle-hal bench: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 2
    random_target = getattr(args, "random_target", None)
    copy = None
    if random_target is not None:
        target, draft, prompts = _random_models(args, backend)
        draft_dir, model, draft_name = None, f"random {random_target}", "random EAGLE-3 head"
        _progress(f"bench: timing a {args.copy_test_mib} MiB device-to-device copy")
        copy = copy_bandwidth(backend, args.copy_test_mib << 20)
    else:
        _progress("bench: loading models")
        llm = LLM(model=args.model, draft=None if args.draft == "none" else args.draft,
                  device=args.device, backend=backend, dtype=args.dtype,
                  max_context=args.max_context, seed=args.seed, draft_vocab="full")
        prompts = [llm.encode(text, chat=True) for text in texts]
        for mode in config.modes:  # every mode's draft vocabulary resolves before any is timed
            if mode_spec(mode)[0] not in HEADLESS:
                restrict(llm.draft, llm.draft_path, config.draft_vocab_for(mode), llm.backend)
        target, draft, draft_dir = llm.target, llm.draft, llm.draft_path
        model = str(args.model or "default")
        draft_name = str(llm.draft_path) if llm.draft is not None else None
    rows = benchmark(backend, target, draft, prompts, config,
                     max_context=args.max_context, draft_dir=draft_dir,
                     prefix_caching=args.prefix_caching)
    if copy is not None:
        peak = args.peak_bandwidth * 1e9 if args.peak_bandwidth else _backend_peak(backend)
        for row in rows:
            if row["mode"] == "plain":
                row["bandwidth"] = decode_bandwidth(
                    row, target.config, target.lm_head.weight.element_size(),
                    [len(p) for p in prompts], config.max_new_tokens, copy, peak)
    report: dict[str, Any] = {
        "config": {**dataclasses.asdict(config), "dataset": args.dataset,
                   "num_prompts": len(prompts), "model": model,
                   "prefix_caching": args.prefix_caching, "draft": draft_name,
                   "backend": backend.name, "device": str(backend.torch_device),
                   "dtype": str(target.dtype), "torch": torch.__version__,
                   "command": " ".join(sys.argv)},
        "results": rows,
    }
    if random_target is not None:
        report["config"].update(
            random_target=random_target, prompt_tokens=args.prompt_tokens,
            dataset=f"random token ids ({args.prompt_tokens} a prompt; no tokenizer)",
            copy_bytes_per_s=copy)
    if args.hf_baseline:
        _progress("bench: HF transformers generate baseline (batch size 1)")
        report["hf_baseline"] = hf_baseline(target, prompts, config.max_new_tokens)
        _progress(f"  {report['hf_baseline']['tokens_per_s']:.1f} tokens/s")
    for path in write_results(args.out, report):
        _progress(f"wrote {path}")
    print(format_table(report), flush=True)
    return 0


def _random_models(args: argparse.Namespace, backend: Any) -> tuple[Any, Any, list[list[int]]]:
    """``--random-target``: the target and head built on the backend's device
    (``model.random_targets``; bf16 unless ``--dtype``), and ``--num-prompts`` prompts of
    ``--prompt-tokens`` random token ids (a random model has no tokenizer)."""
    import torch

    from eagle_hal.model.random_targets import build_random_models

    dtype = getattr(torch, args.dtype or "bfloat16")
    _progress(f"bench: building a random {args.random_target} target and EAGLE-3 head on "
              f"{backend.torch_device} ({dtype}); prompts are random token ids")
    target, head = build_random_models(args.random_target, backend.torch_device, dtype,
                                       seed=args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    prompts = torch.randint(0, target.config.vocab_size, (args.num_prompts, args.prompt_tokens),
                            generator=generator).tolist()
    return target, head, prompts


def _backend_peak(backend: Any) -> float | None:
    """The backend's nominal memory bandwidth in bytes/s, where it knows it."""
    peak = getattr(backend, "peak_memory_bandwidth", None)
    peak = peak() if callable(peak) else peak
    return float(peak) if peak else None
