"""The host's own work per request and decode step at large batches: plain decoding as the
data stage of ``train-draft`` and ``bench --batch-sizes 64`` run it.

On an H200, plain decoding's whole runs come to 2.07 ms a step at batch 64 against 1.29 ms
at batch 16 (30,936 and 12,380 tokens/s: ``eagle-hal bench --device cuda:0 --dtype bfloat16
--dataset benchmarks/data/mt_bench_question.jsonl --num-prompts 80 --max-new-tokens 256
--batch-sizes 16,64 --modes plain``): 16 µs more per request, far more than the device
needs for one more row of a 135M model. That is host time per request: scheduling, page
reservations, slot lists, appending tokens, stops, streaming deltas. This script measures it
on the CPU with a tiny random target (the forward costs little), the backend's graphs
emulated (``testing.graphs``) and one iteration in flight, as on a GPU:

    python benchmarks/bench_engine_host.py --batch-sizes 16,64,256
    python benchmarks/bench_engine_host.py --batch-sizes 256 --baseline REV   # REV's too

For each batch size it runs ``--steps`` engine steps with every request kept running
(finished ones are replaced, ``--max-new-tokens`` each) and reports, over the steps that
decoded a full batch, the median wall time of a step, the part spent in the target's forward,
logits and sampling (timed around them:
device work on a GPU), and the rest, the host's, per step and per request. ``--tokenizer``
streams text through a character detokenizer as ``eagle-hal bench`` does through the
model's; ``--temperature`` > 0 samples with per-request seeds as the data stage does.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_host_overhead import run_baseline  # noqa: E402 - a sibling script


def _timed(owner: object, name: str, spent: list[float]) -> None:
    """Wrap ``owner.name`` so that its wall time adds to ``spent[0]``."""
    inner = getattr(owner, name)

    def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        start = time.perf_counter()
        try:
            return inner(*args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - start

    setattr(owner, name, wrapper)


def measure(batch_size: int, steps: int, max_new_tokens: int, temperature: float,
            tokenizer: bool) -> dict[str, float]:
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.model.config import ModelConfig
    from eagle_hal.model.llama import LlamaForCausalLM
    from eagle_hal.speculative import overlap
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.graphs import replaying_cpu_backend
    from eagle_hal.testing.models import randomize
    from eagle_hal.testing.tokenizers import CharTokenizer

    torch.manual_seed(0)
    shape = dict(architecture="llama", vocab_size=256, hidden_size=32, intermediate_size=64,
                 num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16,
                 max_position_embeddings=1024)
    backend = replaying_cpu_backend()
    target = LlamaForCausalLM(ModelConfig(**shape), dtype=torch.float32,
                              device=backend.torch_device)
    randomize(target, seed=0, scale=0.3)
    llm = LLM.from_models(backend, target, None, CharTokenizer() if tokenizer else None,
                          SpecConfig(num_steps=0), max_batch_size=batch_size,
                          max_context=1024, seed=0, min_admit=max(1, batch_size // 8))
    llm.worker.overlap = True  # as on a GPU (the CPU backend turns it off)
    llm.runner.enable_graphs((batch_size,))
    spent = [0.0]
    _timed(llm.runner, "run_target", spent)
    _timed(llm.runner.target, "compute_logits", spent)
    _timed(llm.worker.ops, "masked_argmax", spent)
    _timed(overlap, "accept_tree", spent)
    prefills = [0.0]
    _timed(llm.worker, "prefill", prefills)  # steps that prefill are left out
    engine = llm.engine
    generator = torch.Generator().manual_seed(0)
    issued = 0

    def submit() -> None:
        nonlocal issued
        ids = torch.randint(3, shape["vocab_size"], (24 + issued % 40,), generator=generator)
        params = SamplingParams(max_tokens=max_new_tokens, temperature=temperature,
                                seed=issued, ignore_eos=True)
        engine.add_request(ids.tolist(), params)
        issued += 1

    for _ in range(batch_size):
        submit()
    walls: list[float] = []
    forwards: list[float] = []
    sizes: list[int] = []
    for step in range(steps + 20):
        spent[0] = prefills[0] = 0.0
        start = time.perf_counter()
        result = engine.step()
        wall = time.perf_counter() - start
        if step >= 20 and not prefills[0] and len(engine.scheduler.running) == batch_size:
            walls.append(wall)
            forwards.append(spent[0])
            sizes.append(len(engine.scheduler.running))
        for delta in result:
            if delta.finished:
                submit()
    if not walls:
        raise SystemExit(f"no step decoded a full batch of {batch_size}: give more --steps "
                         "or --max-new-tokens")
    host = [w - f for w, f in zip(walls, forwards, strict=False)]
    return {
        "batch_size": batch_size,
        "steps_timed": len(walls),
        "step_ms": 1e3 * statistics.median(walls),
        "forward_ms": 1e3 * statistics.median(forwards),
        "host_ms": 1e3 * statistics.median(host),
        "host_us_per_request": 1e6 * statistics.median(host) / batch_size,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", default="16,64,256")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--tokenizer", action="store_true")
    parser.add_argument("--baseline", help="git revision to compare against")
    parser.add_argument("--json", action="store_true", help="print one JSON line only")
    args = parser.parse_args()
    torch.set_num_threads(1)  # steadier timings on a shared host
    baseline = None
    if args.baseline:  # first, so that both measure on an equally warm machine
        forwarded, skip = [], False
        for arg in sys.argv[1:]:  # all but --baseline REV (or --baseline=REV)
            if skip or arg.startswith("--baseline="):
                skip = False
                continue
            skip = arg == "--baseline"
            if not skip:
                forwarded.append(arg)
        baseline = run_baseline(args.baseline, forwarded, __file__)
    measure(8, 50, max(args.max_new_tokens, 8), args.temperature, args.tokenizer)  # warm-up
    rows = [measure(int(b), args.steps, args.max_new_tokens, args.temperature, args.tokenizer)
            for b in args.batch_sizes.split(",")]
    if args.json:
        print(json.dumps(rows))
        return
    print(f"plain decoding, tiny target, emulated graphs, overlap on; temperature "
          f"{args.temperature}, tokenizer {'on' if args.tokenizer else 'off'}; medians of "
          f"{args.steps} steps")
    print(f"{'batch':>6} {'step ms':>9} {'forward ms':>11} {'host ms':>9} {'host us/request':>16}"
          + ("   baseline host us/request" if baseline else ""))
    for i, row in enumerate(rows):
        line = (f"{row['batch_size']:>6} {row['step_ms']:>9.2f} {row['forward_ms']:>11.2f} "
                f"{row['host_ms']:>9.2f} {row['host_us_per_request']:>16.1f}")
        if baseline:
            line += f"   {baseline[i]['host_us_per_request']:>10.1f}"
        print(line)


if __name__ == "__main__":
    main()
