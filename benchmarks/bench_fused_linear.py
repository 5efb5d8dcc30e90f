"""Time a decoder layer's projections on CUDA: GEMMs + Triton model kernels against the
fused small-batch kernels (``eagle_hal.ops.triton.fused_linear``).

    python benchmarks/bench_fused_linear.py [--dtype bfloat16] [--rows 1,6,16,32]
        [--configs 16x128x4x3,32x128x4x3]

Per layer, attention excluded (its output is stood in for by q), SmolLM2-135M's geometry
(hidden 576, 9/3 heads x 64, intermediate 1536):

* unfused: add + RMSNorm, QKV GEMM, rotary, O GEMM, add + RMSNorm, gate/up GEMM,
  silu(gate) * up, down GEMM — 8 launches, as the model ran before;
* fused: [add +] RMSNorm + QKV + rotary, O, add + RMSNorm + gate/up + silu, down — 4.

Each layer has its own weights (30 layers hold ~210 MB, more than the L2 cache, as in the
model). A variant is captured in a CUDA graph over the ``--layers`` layers, replayed
``--repeats`` times and timed with CUDA events; the table gives the median device time per
layer in microseconds. ``--configs`` adds fused columns with forced launch configurations
``BLOCK_N x BLOCK_K x warps x stages``. The fused outputs are checked against the unfused
ones of one layer first. Needs a CUDA device and Triton.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from bench_attention import graph_median_us, require_cuda  # noqa: E402


class Layers:
    """``count`` layers of random weights in SmolLM2-135M's geometry."""

    def __init__(self, count: int, dtype: torch.dtype, rows: int) -> None:
        self.hidden, self.heads, self.kv_heads, self.head_dim = 576, 9, 3, 64
        self.intermediate = 1536
        device = torch.device("cuda")
        g = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape: int, scale: float) -> torch.Tensor:
            return (scale * torch.randn(shape, generator=g, device=device)).to(dtype)

        h, i = self.hidden, self.intermediate
        width = (self.heads + 2 * self.kv_heads) * self.head_dim
        self.weights = [
            dict(
                norm1=1 + rand(h, scale=0.1), qkv=rand(width, h, scale=h**-0.5),
                o=rand(h, self.heads * self.head_dim, scale=h**-0.5),
                norm2=1 + rand(h, scale=0.1), gate_up=rand(2 * i, h, scale=h**-0.5),
                down=rand(h, i, scale=i**-0.5),
            )
            for _ in range(count)
        ]
        self.x = rand(rows, h, scale=1.0)
        self.residual = rand(rows, h, scale=1.0)
        angles = torch.rand(rows, self.head_dim // 2, generator=g, device=device) * 6.28
        angles = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = angles.cos().to(dtype), angles.sin().to(dtype)

    def unfused(self) -> tuple[torch.Tensor, torch.Tensor]:
        from eagle_hal.ops.triton import model_kernels as mk  # noqa: PLC0415

        hidden, residual = self.x, self.residual
        rows, q_size = hidden.shape[0], self.heads * self.head_dim
        kv_size = self.kv_heads * self.head_dim
        for w in self.weights:
            normed, residual = mk.add_rms_norm(hidden, residual, w["norm1"], 1e-5)
            q, k, _ = F.linear(normed, w["qkv"]).split([q_size, kv_size, kv_size], dim=-1)
            q, _ = mk.rotary(q.view(rows, self.heads, self.head_dim),
                             k.view(rows, self.kv_heads, self.head_dim), self.cos, self.sin)
            hidden = F.linear(q.reshape(rows, q_size), w["o"])
            normed, residual = mk.add_rms_norm(hidden, residual, w["norm2"], 1e-5)
            hidden = F.linear(mk.silu_mul(F.linear(normed, w["gate_up"])), w["down"])
        return hidden, residual

    def fused(self, config: object | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        from eagle_hal.ops.triton import fused_linear as fl  # noqa: PLC0415

        hidden, residual = self.x, self.residual
        rows, q_size = hidden.shape[0], self.heads * self.head_dim
        for w in self.weights:
            q, _, _, residual = fl.qkv_rotary(
                hidden, residual, w["norm1"], 1e-5, w["qkv"], None, self.cos, self.sin,
                self.heads, self.kv_heads, config=config,
            )
            hidden = fl.linear(q.reshape(rows, q_size), w["o"], config=config)
            activated, residual = fl.gate_up_silu(hidden, residual, w["norm2"], 1e-5,
                                                  w["gate_up"], config=config)
            hidden = fl.linear(activated, w["down"], config=config)
        return hidden, residual


def parse_config(text: str):  # noqa: ANN201 - a LaunchConfig
    from eagle_hal.ops.triton.fused_linear import LaunchConfig  # noqa: PLC0415

    block_n, block_k, warps, stages = (int(v) for v in text.split("x"))
    return LaunchConfig(block_n, block_k, warps, stages)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--rows", default="1,2,6,16,32")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--configs", default="16x128x4x3,16x512x4x3,16x256x2x3,16x256x8x3,"
                        "16x256x4x2,16x256x4x4,32x256x4x3")
    args = parser.parse_args()
    require_cuda("bench_fused_linear.py")
    dtype = getattr(torch, args.dtype)
    configs = [c for c in args.configs.split(",") if c]
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, "
          f"{args.layers} layers; median us per layer (attention excluded)")
    header = f"{'rows':>5} {'unfused':>9} {'fused':>9} {'ratio':>7}" + "".join(
        f" {c:>12}" for c in configs)
    print(header)
    for rows in (int(r) for r in args.rows.split(",")):
        layers = Layers(args.layers, dtype, rows)
        with torch.inference_mode():
            one = Layers(1, dtype, rows)
            expected, fused = one.unfused(), one.fused()
            for e, f in zip(expected, fused, strict=True):
                torch.testing.assert_close(f.float(), e.float(), atol=0.1, rtol=0.05)
            # one graph of all the layers; per layer = its time / the number of layers
            unfused_us = graph_median_us(layers.unfused, 1, args.repeats) / args.layers
            fused_us = graph_median_us(layers.fused, 1, args.repeats) / args.layers
            line = f"{rows:>5} {unfused_us:9.2f} {fused_us:9.2f} {unfused_us / fused_us:6.2f}x"
            for text in configs:
                config = parse_config(text)
                us = graph_median_us(lambda c=config: layers.fused(c), 1,
                                     args.repeats) / args.layers
                line += f" {us:12.2f}"
        print(line, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
