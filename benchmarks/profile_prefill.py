"""What one prefill costs, on the host and on the device: torch profiler over prefills.

``benchmarks/profile_host.py`` found a bench run's prefills taking a fifth to three fifths
of its wall time. This times prefills alone (``generate`` of one prompt with one new
token, device synchronised around each), with and without the draft head, then profiles a
few of them and prints the operators by device time and by host time, and the device's
busy time (the union of its kernel intervals) against the wall time; each with the
prefill graphs (``GraphRunner.token_buckets``) off and on, in one process. ``--group N``
prefills N prompts at a time (one ragged prefill).

    python benchmarks/profile_prefill.py --device cuda:0 --model M.gguf --draft HEAD \\
        --dataset mt_bench_question.jsonl [--group 8]
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).parent))


def busy_ms(prof: profile) -> float:
    """The union of the device kernels' intervals, in ms."""
    spans = sorted(
        (e.time_range.start, e.time_range.end) for e in prof.events()
        if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > e.time_range.start
    )
    total, end = 0.0, float("-inf")
    for start, stop in spans:
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total / 1e3


def main() -> int:
    from profile_host import build_models, model_parser  # noqa: PLC0415

    parser = model_parser(__doc__.splitlines()[0], num_prompts=20)
    parser.add_argument("--profiled", type=int, default=5)
    parser.add_argument("--rows", type=int, default=25)
    parser.add_argument("--group", type=int, default=1, help="prompts per prefill")
    args = parser.parse_args()

    from eagle_hal.api import LLM  # noqa: PLC0415
    from eagle_hal.engine.request import SamplingParams  # noqa: PLC0415
    from eagle_hal.speculative.config import SpecConfig  # noqa: PLC0415

    backend, target, draft, prompts = build_models(args)
    one = SamplingParams(max_tokens=1, ignore_eos=True)
    group = max(1, args.group)
    print(f"device {backend.torch_device}, {len(prompts)} prompts, mean "
          f"{sum(map(len, prompts)) / len(prompts):.0f} tokens, {group} per prefill", flush=True)
    groups = [prompts[i : i + group] for i in range(0, len(prompts) - group + 1, group)]
    if not groups:
        parser.error(f"--group {group} needs at least as many prompts (--num-prompts)")
    cases = [(f"{name}, prefill graphs {state}", head, state == "on")
             for name, head in (("target only", None), ("target + draft head", draft))
             for state in ("off", "on")]
    for name, head, padded in cases:
        llm = LLM.from_models(backend, target, head, spec=SpecConfig(num_steps=5, topk=1),
                              max_batch_size=group, max_context=2048, seed=0)
        llm.runner.enable_graphs(prefill_graphs=padded)
        for _ in range(2):  # warm-up: every prompt length's kernels
            llm.generate(prompts, one)
        wall = []
        for batch in groups:
            backend.synchronize()
            start = time.perf_counter()
            llm.generate(batch, one)
            backend.synchronize()
            wall.append(time.perf_counter() - start)
        activities = [ProfilerActivity.CPU]
        if backend.torch_device.type == "cuda":
            activities.append(ProfilerActivity.CUDA)
        backend.synchronize()
        with profile(activities=activities) as prof:
            for batch in groups[: args.profiled]:
                llm.generate(batch, one)
            backend.synchronize()
        per = len(groups[: args.profiled])
        print(f"\n== {name}: wall {statistics.median(wall) * 1e3:.2f} ms per prefill "
              f"(median of {len(wall)}); under the profiler: device busy "
              f"{busy_ms(prof) / per:.2f} ms per prefill", flush=True)
        table = prof.key_averages()
        if backend.torch_device.type == "cuda":
            print(table.table(sort_by="self_cuda_time_total", row_limit=args.rows,
                              max_name_column_width=60))
        print(table.table(sort_by="self_cpu_time_total", row_limit=args.rows,
                          max_name_column_width=60))
        del llm
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
