"""Where a whole generation's wall time goes on the host: prefills against decode steps.

``eagle-hal bench`` times whole generations, prefills and request turnover included, while
the adaptive controller and the per-iteration profiles see decode iterations only. This
script splits a bench-like timed run (same warm-up: ``commands.bench._Measurement``) by
timing every ``Engine.step`` and every ``Worker.prefill`` / ``Worker.decode`` /
``Worker.drain`` call (device synchronised after the run only, so the overlap stays as in
the bench), then runs the same generation under ``cProfile`` and prints the functions with
the most own time and the engine/worker entry points by cumulative time. Decode calls
are also split by the batch's size (up to each power of two): calls, wall time, tokens
emitted, so a mode that loses on a draining batch's tail shows where.

    python benchmarks/profile_host.py --device cuda:0 --model M.gguf --draft HEAD \\
        --dataset mt_bench_question.jsonl --modes plain,adaptive --batch-sizes 1,16

``--model tiny`` uses a 2-layer random Llama (vocabulary 512) with a random head, so that
on a CPU the figures are the host's own work.
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import io
import pstats
import sys
import time
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))


def build_models(args: argparse.Namespace) -> tuple[Any, Any, Any, list[list[int]]]:
    """(backend, target, draft, prompts as token ids)."""
    if args.model == "tiny":
        from bench_host_overhead import build  # noqa: PLC0415

        llm = build(args.device, 1)
        generator = torch.Generator().manual_seed(0)
        prompts = [torch.randint(3, 500, (int(n),), generator=generator).tolist()
                   for n in torch.randint(40, 120, (args.num_prompts,), generator=generator)]
        return llm.backend, llm.target, llm.draft, prompts
    from eagle_hal import LLM  # noqa: PLC0415
    from eagle_hal.commands.bench import load_prompts  # noqa: PLC0415

    llm = LLM(model=args.model, draft=args.draft, device=args.device, dtype=args.dtype,
              max_context=2048)
    texts = load_prompts(args.dataset, args.num_prompts)
    return llm.backend, llm.target, llm.draft, [llm.encode(t, chat=True) for t in texts]


class Clock:
    """Wall time and call counts of wrapped callables, by name."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.calls: dict[str, int] = collections.defaultdict(int)

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        real = getattr(owner, attribute)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - start
                self.calls[name] += 1

        setattr(owner, attribute, timed)

    def clear(self) -> None:
        self.seconds.clear()
        self.calls.clear()


class DecodeBySize:
    """``Worker.decode`` calls by batch size (rounded up to a power of two): calls, wall
    seconds and tokens emitted."""

    def __init__(self, worker: Any) -> None:
        self.rows: dict[int, list[float]] = collections.defaultdict(lambda: [0, 0.0, 0])
        real = worker.decode

        def timed(requests: Any) -> Any:
            start = time.perf_counter()
            emitted = real(requests)
            row = self.rows[1 << max(len(requests) - 1, 0).bit_length()]
            row[0] += 1
            row[1] += time.perf_counter() - start
            row[2] += sum(len(e) for e in emitted)
            return emitted

        worker.decode = timed

    def table(self, total: float) -> str:
        lines = ["  decode by batch size: size <= N, calls, ms (% of run), tokens, tokens/s"]
        for size, (calls, seconds, tokens) in sorted(self.rows.items()):
            rate = tokens / seconds if seconds > 0 else 0.0
            lines.append(f"    <= {size:3d} {int(calls):6d} {seconds * 1e3:9.1f} "
                         f"({100 * seconds / total:5.1f} %) {int(tokens):7d} {rate:9.1f}")
        return "\n".join(lines)


def profile_one(llm: Any, measurement: Any, top: int) -> str:
    """The generation under cProfile: top functions by own time, then the entry points."""
    profiler = cProfile.Profile()
    profiler.enable()
    measurement.run_once()
    profiler.disable()
    out = io.StringIO()
    stats = pstats.Stats(profiler, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats(
        r"(engine|worker|iteration|eager|overlap|speculative_overlap|draft_tracker|runner"
        r"|forward|draft_loop|drafting|acceptance|adaptive|reports|detokeni|scheduler)\.py", top)
    return out.getvalue()


def model_parser(description: str, num_prompts: int) -> argparse.ArgumentParser:
    """The arguments ``build_models`` reads (shared with ``profile_prefill.py``)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default="tiny")
    parser.add_argument("--draft", default=None)
    parser.add_argument("--dataset", default="benchmarks/data/mt_bench_question.jsonl")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--num-prompts", type=int, default=num_prompts)
    return parser


def main() -> int:
    parser = model_parser(__doc__.splitlines()[0], num_prompts=40)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--modes", default="plain,adaptive")
    parser.add_argument("--batch-sizes", default="1,16")
    parser.add_argument("--top", type=int, default=30)
    parser.add_argument("--no-cprofile", action="store_true")
    args = parser.parse_args()

    from eagle_hal.api import LLM  # noqa: PLC0415
    from eagle_hal.commands.bench import BenchConfig, _Measurement  # noqa: PLC0415
    from eagle_hal.engine.request import SamplingParams  # noqa: PLC0415

    backend, target, draft, prompts = build_models(args)
    config = BenchConfig(modes=tuple(args.modes.split(",")), batch_sizes=(1,),
                         max_new_tokens=args.max_new_tokens)
    params = SamplingParams(max_tokens=args.max_new_tokens)
    print(f"device {backend.torch_device}, model {args.model}, {len(prompts)} prompts "
          f"(mean {sum(map(len, prompts)) / len(prompts):.0f} tokens) x "
          f"{args.max_new_tokens} new tokens", flush=True)
    for batch_size in (int(b) for b in args.batch_sizes.split(",")):
        for mode in config.modes:
            llm = LLM.from_models(backend, target, None if mode == "plain" else draft,
                                  spec=config.spec_for(mode), max_batch_size=batch_size,
                                  max_context=2048, seed=0)
            llm.runner.enable_graphs()
            measurement = _Measurement(llm, prompts, params, batch_size)
            measurement.run_once()  # one more, untimed: steady state
            clock = Clock()
            worker, engine = llm.worker, llm.engine
            by_size = DecodeBySize(worker)
            for name in ("prefill", "decode", "drain"):
                if hasattr(worker, name):
                    clock.wrap(worker, name, f"worker.{name}")
            clock.wrap(engine, "step", "engine.step")
            backend.synchronize()
            start = time.perf_counter()
            rate = measurement.run_once()
            total = time.perf_counter() - start
            steps = clock.seconds["engine.step"]
            print(f"\n== {mode}, batch size {batch_size}: {rate:.1f} tokens/s, "
                  f"{total * 1e3:.1f} ms", flush=True)
            for name in sorted(clock.seconds):
                seconds, calls = clock.seconds[name], clock.calls[name]
                print(f"  {name:<16} {calls:6d} calls {seconds * 1e3:9.1f} ms "
                      f"({100 * seconds / total:5.1f} %), {seconds / calls * 1e3:7.3f} ms each")
            print(f"  outside steps    {(total - steps) * 1e3:9.1f} ms "
                  f"({100 * (total - steps) / total:5.1f} %): submit, outputs, sync")
            print(by_size.table(total))
            if not args.no_cprofile:
                print(profile_one(llm, measurement, args.top), flush=True)
            del measurement, llm
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
