"""Decode throughput of a random-weight Llama at several tensor-parallel sizes.

    python -m eagle_hal.parallel.bench --device <kind> --tp 1 2 --preset 8b --batch 1 8

For each TP size it spawns that many ranks, builds the model sharded on them with random
weights (no checkpoint needed: speed does not depend on the values), and times plain
decoding of ``--new-tokens`` tokens per request after a warm-up. Rank 0 prints one JSON
line per (tp, batch). Figures come from here, never from tests.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence

import torch

from eagle_hal.backend import Backend
from eagle_hal.model.config import ModelConfig
from eagle_hal.parallel.context import ParallelContext

__all__ = ["PRESETS", "main"]

# Llama-3-shaped geometries: (hidden, intermediate, layers, heads, kv heads, vocab)
PRESETS: dict[str, tuple[int, int, int, int, int, int]] = {
    "tiny": (256, 512, 4, 8, 4, 32000),
    "1b": (2048, 8192, 16, 32, 8, 128256),
    "8b": (4096, 14336, 32, 32, 8, 128256),
}


def _config(preset: str) -> ModelConfig:
    hidden, intermediate, layers, heads, kv_heads, vocab = PRESETS[preset]
    return ModelConfig(
        architecture="llama", vocab_size=vocab, hidden_size=hidden,
        intermediate_size=intermediate, num_layers=layers, num_heads=heads,
        num_kv_heads=kv_heads, head_dim=hidden // heads, max_position_embeddings=4096,
    )


def _bench_rank(
    context: ParallelContext, backend: Backend, preset: str, batches: tuple[int, ...],
    new_tokens: int, dtype_name: str,
) -> None:
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.parallel.sharding import sharded_llama
    from eagle_hal.speculative.config import SpecConfig

    dtype = getattr(torch, dtype_name)
    target = sharded_llama(_config(preset), context, dtype, backend.torch_device)
    generator = torch.Generator(device=backend.torch_device).manual_seed(context.rank)
    with torch.no_grad():
        for name, param in target.named_parameters():
            if "norm" in name:
                param.fill_(1.0)
            else:
                param.normal_(0.0, 0.02, generator=generator)
    prompt_len = 32
    for batch in batches:
        llm = LLM.from_models(
            backend, target, None, spec=SpecConfig(num_steps=0), max_batch_size=batch,
            max_context=prompt_len + new_tokens + 8,
            kv_cache_tokens=batch * (prompt_len + new_tokens + 8),
        )
        prompts = [[(7 * b + i) % 1000 + 1 for i in range(prompt_len)] for b in range(batch)]
        llm.generate(prompts, SamplingParams(max_tokens=4, ignore_eos=True))  # warm-up
        context.barrier()
        backend.synchronize()
        start = time.perf_counter()
        outputs = llm.generate(prompts, SamplingParams(max_tokens=new_tokens, ignore_eos=True))
        backend.synchronize()
        elapsed = time.perf_counter() - start
        tokens = sum(o.num_tokens for o in outputs)
        if context.is_first_rank:
            print(json.dumps({
                "preset": preset, "tp": context.world_size, "batch": batch, "dtype": dtype_name,
                "device": backend.torch_device.type, "collective": context.distributed_backend,
                "tokens": tokens, "seconds": round(elapsed, 3),
                "tokens_per_s": round(tokens / elapsed, 1),
            }), flush=True)
        del llm


def main(argv: Sequence[str] | None = None) -> int:
    from eagle_hal.parallel.launch import spawn_ranks

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--tp", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--preset", choices=sorted(PRESETS), default="8b")
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--dtype", default="bfloat16", choices=["float32", "bfloat16", "float16"])
    args = parser.parse_args(argv)
    for tp in args.tp:
        spawn_ranks(
            _bench_rank, tp, (args.preset, tuple(args.batch), args.new_tokens, args.dtype),
            device=args.device, backend=args.backend,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
