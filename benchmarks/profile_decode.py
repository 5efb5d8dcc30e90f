"""Where the time of one decode iteration goes: torch profiler over a short generation.

Runs plain / chain / tree decoding of one prompt at batch size 1 (graphs on where the backend
has them), after a warm-up that captures the graphs, and writes for each mode:

* ``MODE.txt``: the profiler's operator table sorted by host (CPU) time and by device time,
  and a summary — wall time per iteration, device-busy time per iteration (the sum of kernel
  times), host-side launches per iteration (kernel launches, graph launches, copies, syncs);
* ``summary.json``: the same summary for all modes, with the device timeline: how much of
  the profiled span the device was busy, its idle gaps, and the kernels by total time
  (kernels inside graph replays included);
* ``MODE.trace.json.gz`` with ``--trace``: the profiler's Chrome trace.

    python benchmarks/profile_decode.py --device cuda:0 --model M.gguf --draft HEAD --out DIR

``--model random`` uses a SmolLM2-135M-shaped model with random weights (no checkpoint).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import sys
import time
from pathlib import Path

import torch
from eagle_hal import LLM, SamplingParams
from eagle_hal.speculative.config import SpecConfig
from torch.profiler import ProfilerActivity, profile

_LAUNCH_NAMES = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernelEx")


def build(args: argparse.Namespace) -> LLM:
    if args.model != "random":
        draft = None if args.draft == "none" else args.draft
        return LLM(model=args.model, draft=draft, device=args.device, dtype=args.dtype,
                   max_batch_size=8, max_context=2048, progress=False,
                   graphs=not args.no_graphs and "auto")
    sys.path.insert(0, str(Path(__file__).parent))
    from bench_random_smollm2 import build as build_random  # noqa: PLC0415
    from eagle_hal import select_backend

    backend = select_backend(args.device)
    target, head = build_random(backend.torch_device, getattr(torch, args.dtype))
    llm = LLM.from_models(backend, target, head, None, max_batch_size=8, max_context=2048)
    if not args.no_graphs:
        llm.runner.enable_graphs()
    return llm


def device_timeline(prof: profile, iterations: int) -> dict:
    """The device's view: busy time (the union of kernel intervals) against the span from
    the first kernel to the last, the largest idle gaps with the kernels around them, and
    the kernels by total time, per iteration."""
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.name) for e in prof.events()
        if e.device_type.name in ("CUDA", "PrivateUse1", "XPU", "MTIA") and e.time_range.end > 0
    )
    if not kernels:
        return {}
    busy, gaps, end_so_far, previous = 0.0, [], kernels[0][0], kernels[0][2]
    for start, end, name in kernels:
        if start > end_so_far:
            gaps.append((start - end_so_far, previous, name))
        busy += max(0.0, end - max(start, end_so_far))
        if end > end_so_far:
            end_so_far, previous = end, name
    span = end_so_far - kernels[0][0]
    totals: dict[str, list[float]] = collections.defaultdict(lambda: [0.0, 0])
    for start, end, name in kernels:
        totals[name][0] += end - start
        totals[name][1] += 1
    top = sorted(totals.items(), key=lambda kv: -kv[1][0])[:25]
    gaps.sort(reverse=True)
    return {
        "kernels_per_iteration": len(kernels) / iterations,
        "span_ms_per_iteration": span / 1e3 / iterations,
        "busy_ms_per_iteration": busy / 1e3 / iterations,
        "idle_ms_per_iteration": (span - busy) / 1e3 / iterations,
        "gaps_over_20us_per_iteration": sum(g[0] > 20 for g in gaps) / iterations,
        "largest_gaps_us": [[round(g, 1), a[:60], b[:60]] for g, a, b in gaps[:12]],
        "kernels_by_time": [
            {"name": name[:90], "us_per_iteration": round(t / iterations, 2),
             "calls_per_iteration": round(n / iterations, 2), "us_per_call": round(t / n, 2)}
            for name, (t, n) in top
        ],
    }


def spec_for(mode: str) -> SpecConfig:
    if mode == "plain":
        return SpecConfig(num_steps=0)
    if mode == "chain":
        return SpecConfig(num_steps=5, topk=1)
    return SpecConfig(num_steps=5, topk=4, num_draft_tokens=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--model", default="random")
    parser.add_argument("--draft", default="default")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--modes", default="plain,chain,tree")
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--no-graphs", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("profile-out"))
    parser.add_argument("--trace", action="store_true", help="also write the Chrome trace")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    llm = build(args)
    prompt = list(range(100, 228)) if llm.tokenizer is None else "Explain how a CPU cache works."
    chat = llm.tokenizer is not None
    summary = {}
    for mode in args.modes.split(","):
        if mode != "plain" and llm.draft is None:
            continue
        llm.worker.spec = spec_for(mode)
        llm.worker.controller = None
        params = SamplingParams(max_tokens=args.tokens, ignore_eos=True)
        llm.generate([prompt], params, chat=chat)  # warm-up: captures this mode's graphs
        llm.backend.synchronize()
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            started = time.perf_counter()
            out = llm.generate([prompt], params, chat=chat)[0]
            llm.backend.synchronize()
            wall = time.perf_counter() - started
        iterations = max(1, out.stats.verify_steps)
        events = prof.key_averages()
        device_us = sum(e.self_device_time_total for e in events)
        launches = {name: sum(e.count for e in events if e.key == name)
                    for name in (*_LAUNCH_NAMES, "cudaGraphLaunch", "cudaMemcpyAsync",
                                 "cudaStreamSynchronize", "cudaDeviceSynchronize")}
        row = {
            "tokens": len(out.token_ids), "iterations": iterations, "wall_ms": wall * 1e3,
            "wall_ms_per_iteration": wall * 1e3 / iterations,
            "device_busy_ms_per_iteration": device_us / 1e3 / iterations,
            "tokens_per_s": len(out.token_ids) / wall,
            "launches_per_iteration": {k: v / iterations for k, v in launches.items() if v},
        }
        row["device_timeline"] = device_timeline(prof, iterations)
        if args.trace:
            raw = args.out / f"{mode}.trace.json"
            prof.export_chrome_trace(str(raw))
            with raw.open("rb") as src, gzip.open(f"{raw}.gz", "wb") as dst:
                dst.write(src.read())
            raw.unlink()
        summary[mode] = row
        table_cpu = events.table(sort_by="self_cpu_time_total", row_limit=45)
        table_dev = events.table(sort_by="self_device_time_total", row_limit=30)
        (args.out / f"{mode}.txt").write_text(
            json.dumps(row, indent=2) + "\n\n== by host time ==\n" + table_cpu
            + "\n\n== by device time ==\n" + table_dev + "\n"
        )
        print(mode, json.dumps(row), flush=True)
    (args.out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
