"""Device operations a decode iteration dispatches outside its graph replays, on the CPU.

On a GPU each such operation is a kernel launch or copy issued from Python, and at batch
size 1 the host's time for them is most of an iteration's overhead. This builds the small
random Llama and head of ``bench_host_overhead.py`` on the CPU backend, serves its graphs
from the strict CPU graph emulation (``eagle_hal.testing.graphs.EmulatedGraphCapture``), and
counts per iteration of plain, chain (S=5, K=1) and tree (S=5, K=4, N=16) decoding the aten
operations dispatched outside replays (views, allocations and casts that return their input
excluded: they launch nothing), grouped by the worker's phase.

``--ops triton`` swaps in what the CUDA backend runs: the Triton attention
backend, the Triton ``SamplingOps`` and the Triton model kernels (interpreted: set
``TRITON_INTERPRET=1``); their
kernel launches are counted as ``triton:<kernel>`` and the interpreter's own torch work is
not. ``--by-site`` groups by the eagle_hal source line that issued each operation.

    python benchmarks/count_iteration_ops.py [--iterations 20] [--top 12]
    TRITON_INTERPRET=1 python benchmarks/count_iteration_ops.py --ops triton --by-site
"""

from __future__ import annotations

import argparse
import collections
import sys
import traceback
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).parent))

_FREE = {"view", "_unsafe_view", "as_strided", "empty", "empty_strided", "t", "transpose",
         "expand", "slice", "select", "unsqueeze", "squeeze", "split", "split_with_sizes",
         "unbind", "reshape", "detach", "alias", "permute", "_reshape_alias", "lift_fresh",
         "chunk", "narrow", "is_pinned", "_to_copy_noop"}


# return their input when there is nothing to do: counted only when they made a new tensor
_MAYBE_ALIAS = {"to", "contiguous", "resolve_conj", "resolve_neg"}
_FREE |= {"result_type", "empty_like"}  # a dtype; an allocation


def _aliases(result: object, args: tuple) -> bool:
    return (isinstance(result, torch.Tensor) and bool(args) and isinstance(args[0], torch.Tensor)
            and result.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr())


class Counter(TorchDispatchMode):
    def __init__(self, by_site: bool = False) -> None:
        super().__init__()
        self.suspended = 0
        self.phase = "other"
        self.by_site = by_site
        self.counts: collections.Counter[tuple[str, str]] = collections.Counter()

    def record(self, name: str) -> None:
        if self.suspended:
            return
        where = self.phase
        if self.by_site:  # the innermost eagle_hal frame that is not this tool
            for frame in reversed(traceback.extract_stack(limit=30)[:-2]):
                if "eagle_hal" in frame.filename and "testing/graphs" not in frame.filename:
                    where = f"{frame.filename.split('eagle_hal/')[-1]}:{frame.lineno} {frame.name}"
                    break
        self.counts[(where, name)] += 1

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        name = func.__name__.split(".")[0]
        result = func(*args, **(kwargs or {}))
        if name in _MAYBE_ALIAS and _aliases(result, args):
            return result  # a cast or layout change that returned its input: no kernel
        if name not in _FREE:
            self.record(name)
        return result


def _triton_cpu_backend():  # noqa: ANN202 - a Backend
    """The CPU backend with what the CUDA backend runs: Triton attention, Triton sampling
    ops, the Triton model kernels (norms, rotary, SwiGLU, the fused small-batch projections,
    the draft's softmax top-k), and the (strict) graph emulation."""
    from eagle_hal.ops.triton.attention import TritonAttentionBackend
    from eagle_hal.ops.triton.ops import TritonSamplingOps
    from eagle_hal.testing.graphs import replaying_cpu_backend

    replaying = replaying_cpu_backend()

    class TritonCpu(type(replaying)):
        def create_attention_backend(self, config):  # noqa: ANN001, ANN202
            return TritonAttentionBackend(config)

        def sampling_ops(self):  # noqa: ANN202
            return TritonSamplingOps()

        def model_kernels(self):  # noqa: ANN202 - the Triton kernels a GPU backend runs
            from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

            return TRITON_MODEL_KERNELS

    return TritonCpu(replaying.descriptor, replaying.device_spec)


def _count_triton_launches(counter: Counter) -> None:
    """Count each interpreted Triton kernel launch as one operation, and hide the
    interpreter's own torch work (copies in and out of numpy) from the counter."""
    from triton.runtime.interpreter import InterpretedFunction

    original = InterpretedFunction.run

    def run(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        counter.record(f"triton:{getattr(self.fn, '__name__', '?')}")
        counter.suspended += 1
        try:
            return original(self, *a, **k)
        finally:
            counter.suspended -= 1

    InterpretedFunction.run = run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--ops", choices=["reference", "triton"], default="reference",
                        help="the CPU backend's reference ops, or the CUDA backend's Triton ones")
    parser.add_argument("--by-site", action="store_true", help="group by issuing source line")
    parser.add_argument("--inside-replays", action="store_true",
                        help="count the operations replayed graphs run too (phase 'replay')")
    args = parser.parse_args()

    from bench_host_overhead import build, spec_for  # noqa: PLC0415
    from eagle_hal import SamplingParams, settings  # noqa: PLC0415
    from eagle_hal.engine.graphs.runner import GraphRunner  # noqa: PLC0415
    from eagle_hal.testing import graphs as emulated  # noqa: PLC0415

    counter = Counter(by_site=args.by_site)
    if args.ops == "triton":
        if not settings.triton_interpreted():
            parser.error("--ops triton runs the kernels interpreted: set TRITON_INTERPRET=1")
        _count_triton_launches(counter)
    original_replay = emulated.EmulatedGraph.replay

    def replay(self, *a, **k):  # noqa: ANN001, ANN002, ANN003, ANN202
        if args.inside_replays:  # a device graph's kernels: counted as the replay's phase
            # only the recorded body's: the emulation's copies into its static outputs are
            # what a device graph does without kernels of its own
            body = self.body

            def counted():  # noqa: ANN202
                counter.suspended -= 1
                try:
                    return body()
                finally:
                    counter.suspended += 1

            before, counter.phase, self.body = counter.phase, "replay", counted
            counter.suspended += 1
            try:
                return original_replay(self, *a, **k)
            finally:
                counter.phase, self.body = before, body
                counter.suspended -= 1
        counter.suspended += 1
        try:
            return original_replay(self, *a, **k)
        finally:
            counter.suspended -= 1

    emulated.EmulatedGraph.replay = replay
    llm = build("cpu", 1, backend=_triton_cpu_backend() if args.ops == "triton" else None)
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
        params = SamplingParams(max_tokens=10**6, ignore_eos=True, temperature=0.0)
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
        where = "in all" if args.inside_replays else "outside replays"
        if args.by_site:
            print(f"{mode}: {total:.1f} ops per iteration {where}")
        else:
            print(f"{mode}: {total:.1f} ops per iteration {where}; by phase "
                  + ", ".join(f"{p} {n / args.iterations:.1f}" for p, n in per_phase.items()))
        width = max([14] + [len(phase) for phase, _ in counter.counts])
        for (phase, name), n in counter.counts.most_common(args.top):
            print(f"    {n / args.iterations:6.1f}  {phase:{width}s} {name}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
