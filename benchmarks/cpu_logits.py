"""The lm_head product on this CPU: torch's ``F.linear`` against the CPU backend's
transposed layout (``eagle_hal.backends.cpu.kernels.transposed_logits``).

Times ``x @ W.T`` for a few row counts (1: plain decoding; 6: a chain S = 5 verify; 4: a
tree's draft step at K = 4; 16 and more: wider trees and batches) and vocabulary sizes
(49,152: SmolLM2's whole vocabulary; 10,240: the shipped head's draft vocabulary), hidden
576, float32, random weights. Prints the median of ``--repeats`` calls of each, the ratio
and the largest difference from a float64 product.

    python benchmarks/cpu_logits.py [--rows 1,2,4,6,16,48] [--vocab 49152,10240] [--repeats 21]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F

from eagle_hal.backends.cpu.kernels import transposed_logits


def median_ms(fn, repeats: int) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,6,16,48,128")
    parser.add_argument("--vocab", default="49152,10240")
    parser.add_argument("--hidden", type=int, default=576)
    parser.add_argument("--repeats", type=int, default=21)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"hidden {args.hidden}, median of {args.repeats}")
    print(f"{'vocab':>6} {'rows':>4} {'F.linear ms':>12} {'transposed ms':>14} {'ratio':>6} "
          f"{'max |err|':>10}")
    gen = torch.Generator().manual_seed(0)
    for vocab in (int(v) for v in args.vocab.split(",")):
        weight = torch.randn(vocab, args.hidden, generator=gen)
        for rows in (int(r) for r in args.rows.split(",")):
            x = torch.randn(rows, args.hidden, generator=gen)
            linear = median_ms(lambda: F.linear(x, weight), args.repeats)  # noqa: B023
            transposed = median_ms(lambda: transposed_logits(x, weight), args.repeats)  # noqa: B023
            exact = x.double() @ weight.double().T
            error = float((transposed_logits(x, weight).double() - exact).abs().max())
            print(f"{vocab:>6} {rows:>4} {linear:>12.2f} {transposed:>14.2f} "
                  f"{linear / transposed:>5.2f}x {error:>10.1e}")


if __name__ == "__main__":
    main()
