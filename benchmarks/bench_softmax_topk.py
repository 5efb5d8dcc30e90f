"""Time the draft's next-token candidates on CUDA: torch's softmax + topk against the
Triton ``softmax_topk`` (``eagle_hal.ops.triton.topk_kernels``).

    python benchmarks/bench_softmax_topk.py [--vocab 49152] [--dtype bfloat16]
        [--rows 1,4,16,64] [--k 1,4,8] [--chunks 1024,2048,4096]

* torch: ``torch.softmax(logits.float(), -1).topk(k)``, as ``EagleDraftModel.topk`` ran it;
* triton: ``softmax_topk(logits, k)`` with the chunk it picks for the shape; ``--chunks``
  adds columns with the vocabulary chunk forced, for tuning.

Before it is timed, each variant's output is checked against torch's (probabilities close,
the logits at the returned ids equal to those at torch's: bfloat16 logits tie). Each variant
is captured in a CUDA graph of ``--calls`` back-to-back calls, replayed ``--repeats`` times
and timed with CUDA events; the table gives the median device time per call in
microseconds. Needs a CUDA device and Triton; exits with an error otherwise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))
from bench_attention import graph_median_us, require_cuda  # noqa: E402


def torch_softmax_topk(logits: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.softmax(logits.float(), dim=-1).topk(k, dim=-1)


def check(logits: torch.Tensor, k: int, got: tuple[torch.Tensor, torch.Tensor]) -> None:
    """Raise unless ``got`` is torch's top-k up to the order of tied logits."""
    expected_probs, expected_ids = torch_softmax_topk(logits, k)
    probs, ids = got
    torch.testing.assert_close(probs, expected_probs, rtol=1e-5, atol=1e-8)
    assert torch.equal(logits.gather(-1, ids), logits.gather(-1, expected_ids))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=49152)
    parser.add_argument("--dtype", default="bfloat16",
                        choices=["bfloat16", "float16", "float32"])
    parser.add_argument("--rows", default="1,4,16,64")
    parser.add_argument("--k", default="1,4,8")
    parser.add_argument("--chunks", default="")
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=200)
    args = parser.parse_args()
    require_cuda("bench_softmax_topk.py")
    from eagle_hal.ops.triton.topk_kernels import softmax_topk  # noqa: PLC0415

    dtype = getattr(torch, args.dtype)
    chunks = [int(c) for c in args.chunks.split(",") if c]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, "
          f"vocab {args.vocab}; median us per call")
    print(f"{'rows':>5} {'k':>3} {'torch':>8} {'triton':>8} {'ratio':>7}"
          + "".join(f" {f'chunk {c}':>11}" for c in chunks))
    generator = torch.Generator(device="cuda").manual_seed(0)
    for rows in (int(r) for r in args.rows.split(",")):
        logits = (3 * torch.randn(rows, args.vocab, generator=generator, device="cuda"))
        logits = logits.to(dtype)
        for k in (int(k) for k in args.k.split(",")):
            variants = {"triton": lambda k=k, logits=logits: softmax_topk(logits, k)}
            for c in chunks:
                variants[f"chunk {c}"] = lambda k=k, c=c, logits=logits: softmax_topk(
                    logits, k, chunk=c)
            with torch.inference_mode():
                for call in variants.values():
                    check(logits, k, call())
                torch_us = graph_median_us(lambda k=k, logits=logits: torch_softmax_topk(logits, k),
                                           args.calls, args.repeats)
                times = [graph_median_us(call, args.calls, args.repeats)
                         for call in variants.values()]
            line = f"{rows:>5} {k:>3} {torch_us:8.2f} {times[0]:8.2f} {torch_us / times[0]:6.2f}x"
            print(line + "".join(f" {t:11.2f}" for t in times[1:]), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
