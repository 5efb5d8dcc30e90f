"""Time one EAGLE-1 training step (loss, backward, AdamW) per number of unroll steps.

    python benchmarks/bench_unrolled_loss.py --device cpu --geometry small --unroll 1 3
    python benchmarks/bench_unrolled_loss.py --device cuda --geometry smollm2 --dtype bfloat16

A random target of the chosen geometry (one layer: only its features and ``lm_head`` enter
the loss) gives the features once; a fresh float32 head (``init_eagle1``) is then trained on
random rows of ``--batch-size`` x ``--seq-len`` tokens, under autocast when ``--dtype`` is a
half type, as ``train_eagle1`` does. Reports the median wall time of ``--repeats`` steps
after ``--warmup`` (each fenced by ``torch.accelerator.synchronize``) and the ratio to one
step of unroll 1.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.testing.models import randomize
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import target_features
from eagle_hal.train.loss import unrolled_eagle1_loss
from eagle_hal.train.trainer import init_eagle1

GEOMETRIES = {  # (vocab, hidden, intermediate, heads, kv_heads, head_dim)
    "tiny": (97, 32, 64, 4, 2, 8),
    "small": (4096, 256, 768, 4, 2, 64),
    "smollm2": (49152, 576, 1536, 9, 3, 64),  # SmolLM2-135M's draft layer and vocabulary
}


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--geometry", default="small", choices=sorted(GEOMETRIES))
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--unroll", type=int, nargs="+", default=[1, 2, 3])
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()

    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    vocab, hidden, intermediate, heads, kv_heads, head_dim = GEOMETRIES[args.geometry]
    config = ModelConfig(
        architecture="llama", vocab_size=vocab, hidden_size=hidden,
        intermediate_size=intermediate, num_layers=1, num_heads=heads,
        num_kv_heads=kv_heads, head_dim=head_dim,
    )
    target = LlamaForCausalLM(config, dtype=dtype, device=device)
    randomize(target, seed=0, scale=0.05)
    target.requires_grad_(False)
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, vocab, (args.batch_size, args.seq_len), generator=generator)
    tokens = tokens.to(device)
    rows = PaddedRows(
        tokens,
        torch.full((args.batch_size,), args.seq_len, device=device),
        torch.full((args.batch_size,), args.seq_len // 4, device=device),
    )
    with torch.no_grad():
        features = target_features(target, tokens)  # [B, L, H]
    autocast = dtype in (torch.bfloat16, torch.float16)
    print(
        f"{args.geometry} (vocab {vocab}, hidden {hidden}, {heads}/{kv_heads} heads) on "
        f"{device}, {args.dtype}; "
        f"{args.batch_size} x {args.seq_len} tokens a step"
    )
    baseline = None
    for unroll in args.unroll:
        head = init_eagle1(target, seed=0).train()
        optimizer = torch.optim.AdamW(head.parameters(), lr=1e-4)
        times = []
        for repeat in range(args.warmup + args.repeats):
            synchronize(device)
            start = time.perf_counter()
            with torch.autocast(device.type, dtype=dtype, enabled=autocast):
                parts = unrolled_eagle1_loss(
                    head, target, rows, features, step_weights=(1.0,) * unroll
                )
            optimizer.zero_grad(set_to_none=True)
            parts.total.backward()
            optimizer.step()
            synchronize(device)
            if repeat >= args.warmup:
                times.append(time.perf_counter() - start)
        median = statistics.median(times)
        baseline = baseline or median
        print(f"unroll {unroll}: {median * 1000:8.1f} ms a step  ({median / baseline:.2f}x)")


if __name__ == "__main__":
    main()
