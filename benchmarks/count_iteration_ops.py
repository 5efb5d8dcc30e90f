"""Device operations a decode iteration dispatches outside its graph replays, on the CPU.

On a GPU each such operation is a kernel launch or copy issued from Python, and at batch
size 1 the host's time for them is most of an iteration's overhead. This builds the small
random Llama and head of ``bench_host_overhead.py`` on the CPU backend, serves its graphs
from the strict CPU graph emulation (``eagle_hal.testing.graphs.EmulatedGraphCapture``), and
counts per iteration of plain, chain (S=5, K=1) and tree (S=5, K=4, N=16) decoding the aten
operations dispatched outside replays (views and allocations excluded: they launch
nothing), grouped by the worker's phase.

    python benchmarks/count_iteration_ops.py [--iterations 20] [--top 12]
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))

_FREE = {"view", "_unsafe_view", "as_strided", "empty", "empty_strided", "t", "transpose",
         "expand", "slice", "select", "unsqueeze", "squeeze", "split", "split_with_sizes",
         "unbind", "reshape", "detach", "alias", "permute", "_reshape_alias", "lift_fresh",
         "chunk", "narrow", "is_pinned", "_to_copy_noop"}


class Counter(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.suspended = 0
        self.phase = "other"
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = func.__name__.split(".")[0]
        if not self.suspended and name not in _FREE:
            self.counts[(self.phase, name)] += 1
        return func(*args, **(kwargs or {}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--top", type=int, default=12)
    args = parser.parse_args()

    from bench_host_overhead import build, spec_for  # noqa: PLC0415

    from eagle_hal import SamplingParams  # noqa: PLC0415
    from eagle_hal.engine.graph_runner import GraphRunner  # noqa: PLC0415
    from eagle_hal.testing import graphs as emulated  # noqa: PLC0415

    counter = Counter()
    original_replay = emulated.EmulatedGraph.replay

    def replay(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        counter.suspended += 1
        try:
            return original_replay(self, *a, **k)
        finally:
            counter.suspended -= 1

    emulated.EmulatedGraph.replay = replay
    llm = build("cpu", 1)
    llm.runner.graphs = GraphRunner(llm.runner, emulated.EmulatedGraphCapture())
    worker, engine = llm.worker, llm.engine
    for name in ("catch_up", "_draft_extend"):
        original = getattr(worker, name)

        def phased(*a, _original=original, _name=name, **k):  # noqa: ANN002, ANN003, ANN202
            before, counter.phase = counter.phase, _name
            try:
                return _original(*a, **k)
            finally:
                counter.phase = before

        setattr(worker, name, phased)
    for mode in ("plain", "chain", "tree"):
        worker.spec, worker.controller = spec_for(mode), None
        params = SamplingParams(max_new_tokens=10**6, ignore_eos=True, temperature=0.0)
        request = engine.add_request(list(range(10, 74)), params)
        engine.step()
        for _ in range(5):
            engine.step()
        counter.counts.clear()
        with counter:
            for _ in range(args.iterations):
                engine.step()
        engine.cancel(request.request_id)
        engine.forget(request)
        per_phase: collections.Counter[str] = collections.Counter()
        for (phase, _), n in counter.counts.items():
            per_phase[phase] += n
        total = sum(per_phase.values()) / args.iterations
        print(f"{mode}: {total:.1f} ops per iteration outside replays; by phase "
              + ", ".join(f"{p} {n / args.iterations:.1f}" for p, n in per_phase.items()))
        for (phase, name), n in counter.counts.most_common(args.top):
            print(f"    {n / args.iterations:6.1f}  {phase:14s} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
