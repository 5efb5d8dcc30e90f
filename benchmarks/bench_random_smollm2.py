"""Speed of eagle-hal on a SmolLM2-135M-shaped model with random weights (no checkpoint).

Per-iteration costs, graph capture and tokens/s do not depend on the weights; accept
lengths do (a random head is accepted about as often as chance allows), so speedups from
this script are not meaningful — use ``eagle-hal bench`` with the real model and head.

    python benchmarks/bench_random_smollm2.py --device cuda:0 --dtype bfloat16 \
        --batch-sizes 1,8,64 --modes plain,chain --max-new-tokens 128 --out /tmp/bench
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

import torch
from eagle_hal import select_backend
from eagle_hal.commands.bench import BenchConfig, benchmark, write_results
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.eagle import Eagle1DraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.testing.models import randomize

SMOLLM2_135M = dict(
    architecture="llama", vocab_size=49152, hidden_size=576, intermediate_size=1536,
    num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, max_position_embeddings=8192,
    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
)


def build(device: torch.device, dtype: torch.dtype) -> tuple[LlamaForCausalLM, Eagle1DraftModel]:
    target = LlamaForCausalLM(ModelConfig(**SMOLLM2_135M), dtype=torch.float32, device=device)
    randomize(target, seed=0, scale=0.05)
    head = Eagle1DraftModel(ModelConfig(**{**SMOLLM2_135M, "num_layers": 1}), target,
                            fc_bias=True, dtype=torch.float32)
    randomize(head, seed=1, scale=0.05)
    return target.to(dtype), head.to(dtype)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", default="1")
    parser.add_argument("--modes", default="plain,chain,tree,adaptive")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--prompt-len", type=int, default=128)
    parser.add_argument("--num-prompts", type=int, default=4)
    parser.add_argument("--no-graphs", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("bench-random"))
    args = parser.parse_args()
    backend = select_backend(args.device, backend=args.backend)
    target, head = build(backend.torch_device, getattr(torch, args.dtype))
    gen = torch.Generator().manual_seed(0)
    prompts = torch.randint(0, 49152, (args.num_prompts, args.prompt_len), generator=gen).tolist()
    config = BenchConfig(
        modes=tuple(args.modes.split(",")),
        batch_sizes=tuple(int(b) for b in args.batch_sizes.split(",")),
        max_new_tokens=args.max_new_tokens, graphs=not args.no_graphs,
    )
    rows = benchmark(backend, target, head, prompts, config)
    report = {"config": {**dataclasses.asdict(config), "model": "random SmolLM2-135M shape",
                         "device": str(backend.torch_device), "backend": backend.name,
                         "dtype": args.dtype, "torch": torch.__version__,
                         "command": " ".join(sys.argv)}, "results": rows}
    write_results(args.out, report)
    print(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
