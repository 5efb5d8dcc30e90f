"""Host overhead of one decode iteration on a tiny random Llama: wall time and aten ops.

With a model this small the forwards cost almost nothing, so the figures are dominated by
the worker's own bookkeeping (drafting, acceptance, KV compaction, batch building). For
plain / chain (S=5, K=1) / tree (S=5, K=4, N=16) decoding at batch size 1 it reports the
median wall time of ``EagleWorker.decode`` over many iterations and the aten ops the
profiler records per iteration (all, and top-level ones: those not called by another).

    python benchmarks/bench_host_overhead.py --device cpu
    python benchmarks/bench_host_overhead.py --device cpu --baseline REV   # REV's code too

``--baseline REV`` runs the same measurement over the sources of git revision ``REV``
(exported with ``git archive``) in a subprocess and prints both side by side.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from eagle_hal.backend import Backend

MODES = ("plain", "chain", "tree")
_REPO = Path(__file__).resolve().parent.parent
_SOURCE_DIRS = ["core/src"] + [f"backends/{v}/src" for v in ("cuda", "rocm", "npu", "xpu", "musa")]


def build(device: str, batch_size: int, backend: Backend | None = None):  # noqa: ANN201 - an LLM
    from eagle_hal import LLM, select_backend
    from eagle_hal.model.config import ModelConfig
    from eagle_hal.model.eagle import Eagle1DraftModel
    from eagle_hal.model.llama import LlamaForCausalLM
    from eagle_hal.testing.models import randomize

    shape = dict(architecture="llama", vocab_size=512, hidden_size=64, intermediate_size=128,
                 num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16,
                 max_position_embeddings=4096)
    backend = backend or select_backend(device)
    target = LlamaForCausalLM(ModelConfig(**shape), dtype=torch.float32,
                              device=backend.torch_device)
    randomize(target, seed=0, scale=0.3)
    head = Eagle1DraftModel(ModelConfig(**{**shape, "num_layers": 1}), target, fc_bias=True,
                            dtype=torch.float32)
    randomize(head, seed=1, scale=0.3)
    head.to(backend.torch_device)
    llm = LLM.from_models(backend, target, head, None, max_batch_size=max(batch_size, 1),
                          max_context=4096, seed=0)
    llm.runner.enable_graphs()
    return llm


def spec_for(mode: str):  # noqa: ANN201 - a SpecConfig
    from eagle_hal.speculative.config import SpecConfig

    if mode == "plain":
        return SpecConfig(num_steps=0)
    if mode == "chain":
        return SpecConfig(num_steps=5, topk=1)
    return SpecConfig(num_steps=5, topk=4, num_draft_tokens=16)


def measure(device: str, iterations: int, batch_size: int, temperature: float) -> dict[str, dict]:
    from eagle_hal import SamplingParams
    from torch.profiler import ProfilerActivity, profile

    llm = build(device, batch_size)
    worker, engine = llm.worker, llm.engine
    results: dict[str, dict] = {}
    for mode in MODES:
        worker.spec, worker.controller = spec_for(mode), None
        params = SamplingParams(max_tokens=10**6, ignore_eos=True, temperature=temperature)
        requests = [engine.add_request(list(range(10 + b, 74 + b)), params)
                    for b in range(batch_size)]
        engine.step()  # prefill
        durations: list[float] = []
        decode = worker.decode

        def timed(batch, decode=decode, durations=durations):  # noqa: ANN001, ANN202
            llm.backend.synchronize()
            start = time.perf_counter()
            emitted = decode(batch)
            llm.backend.synchronize()
            durations.append(time.perf_counter() - start)
            return emitted

        worker.decode = timed
        for _ in range(10):  # warm-up: graphs, caches
            engine.step()
        durations.clear()
        for _ in range(iterations):
            engine.step()
        activities = [ProfilerActivity.CPU]
        profiled = 20
        with profile(activities=activities) as prof:
            for _ in range(profiled):
                engine.step()
        del worker.decode
        tokens = sum(len(r.output_ids) for r in requests)
        for request in requests:
            engine.cancel(request.request_id)
            engine.forget(request)
        aten = [e for e in prof.events() if e.name.startswith("aten::")]
        top = [e for e in aten if not _has_aten_parent(e)]
        results[mode] = {
            "median_ms": 1e3 * statistics.median(durations),
            "aten_ops": len(aten) / profiled,
            "top_level_aten_ops": len(top) / profiled,
            "tokens_per_iteration": tokens / (iterations + 30 + 1) / batch_size,
        }
    return results


def _has_aten_parent(event) -> bool:  # noqa: ANN001
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            return True
        parent = parent.cpu_parent
    return False


def run_baseline(rev: str, argv: list[str], script: str = __file__):  # noqa: ANN201 - its JSON
    """Run ``script`` with ``argv`` and ``--json`` over the sources of git revision ``rev``
    (``git archive``, on ``PYTHONPATH``); returns the JSON of its last line."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / "src.tar"
        subprocess.run(["git", "-C", str(_REPO), "archive", "-o", str(archive), rev, *_SOURCE_DIRS],
                       check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(str(Path(tmp) / d) for d in _SOURCE_DIRS))
        out = subprocess.run([sys.executable, script, *argv, "--json"], env=env, check=True,
                             capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--iterations", type=int, default=200)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--baseline", default=None, help="git revision to compare against")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    argv = ["--device", args.device, "--iterations", str(args.iterations),
            "--batch-size", str(args.batch_size), "--temperature", str(args.temperature)]
    base = run_baseline(args.baseline, argv) if args.baseline else None
    current = measure(args.device, args.iterations, args.batch_size, args.temperature)
    if args.json:
        print(json.dumps(current))
        return 0
    print(f"device {args.device}, batch {args.batch_size}, T={args.temperature}, "
          f"{args.iterations} iterations")
    header = f"{'mode':6} {'median ms':>18} {'aten ops/iter':>18} {'top-level ops/iter':>20}"
    print(header + ("   (baseline -> now)" if base else ""))
    for mode in MODES:
        now = current[mode]
        cells = []
        for key, width in (("median_ms", 18), ("aten_ops", 18), ("top_level_aten_ops", 20)):
            text = f"{now[key]:.3g}" if base is None else f"{base[mode][key]:.3g} -> {now[key]:.3g}"
            cells.append(f"{text:>{width}}")
        print(f"{mode:6} " + " ".join(cells))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
