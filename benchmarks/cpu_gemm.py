"""The CPU backend's GEMMs on this machine: torch's ``F.linear`` against the transposed
layout ``W @ x.T`` (``eagle_hal.backends.cpu.kernels.transposed_product``).

Two parts, float32, random weights of SmolLM2-135M's shapes, each the median of
``--repeats`` timed calls:

* ``lm_head``: ``x [n, 576] @ W.T`` for the whole vocabulary (49,152 rows) and the shipped
  draft vocabulary (10,240); the largest difference from a float64 product is printed;
* ``layers``: the four projections of each of ``--layers`` decoder layers (QKV 960 x 576,
  O 576 x 576, gate/up 3,072 x 576, down 576 x 1,536), one weight set per layer, so that
  every weight streams from memory as in a forward (one set, repeated, would sit in the
  cache and time something else).

Rows: 1 (plain decoding), 4 (a tree's draft step at K = 4), 6 (a chain S = 5 verify), 16
(a 16-node tree), more (batches). Past ``MAX_ROWS`` rows the kernel itself takes F.linear.

    python benchmarks/cpu_gemm.py [--rows 1,2,4,6,16,48] [--layers 30] [--repeats 11]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.nn.functional as F
from eagle_hal.backends.cpu.kernels import transposed_product

LAYER_SHAPES = ((960, 576), (576, 576), (3072, 576), (576, 1536))


def median_ms(fn, repeats: int) -> float:
    for _ in range(2):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,2,4,6,16,48")
    parser.add_argument("--vocab", default="49152,10240")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=11)
    args = parser.parse_args()
    rows_list = [int(r) for r in args.rows.split(",")]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, float32, "
          f"median of {args.repeats}")
    print(f"{'part':>16} {'rows':>4} {'F.linear ms':>12} {'transposed ms':>14} {'ratio':>6} "
          f"{'max |err|':>10}")
    gen = torch.Generator().manual_seed(0)
    for vocab in (int(v) for v in args.vocab.split(",")):
        weight = torch.randn(vocab, 576, generator=gen)
        for rows in rows_list:
            x = torch.randn(rows, 576, generator=gen)
            linear = median_ms(lambda: F.linear(x, weight), args.repeats)  # noqa: B023
            transposed = median_ms(lambda: transposed_product(x, weight), args.repeats)  # noqa: B023
            exact = x.double() @ weight.double().T
            error = float((transposed_product(x, weight).double() - exact).abs().max())
            print(f"{f'lm_head {vocab}':>16} {rows:>4} {linear:>12.2f} {transposed:>14.2f} "
                  f"{linear / transposed:>5.2f}x {error:>10.1e}")
    weights = [[torch.randn(o, i, generator=gen) for o, i in LAYER_SHAPES]
               for _ in range(args.layers)]
    for rows in rows_list:
        inputs = {i: torch.randn(rows, i, generator=gen) for _, i in LAYER_SHAPES}

        def stack(product, inputs=inputs):
            for layer in weights:
                for w in layer:
                    product(inputs[w.shape[1]], w)

        linear = median_ms(lambda: stack(F.linear), args.repeats)  # noqa: B023
        transposed = median_ms(lambda: stack(transposed_product), args.repeats)  # noqa: B023
        print(f"{f'{args.layers} layers':>16} {rows:>4} {linear:>12.2f} {transposed:>14.2f} "
              f"{linear / transposed:>5.2f}x {'':>10}")


if __name__ == "__main__":
    main()
