"""Time a decoder layer's projections on CUDA: GEMMs + Triton model kernels against the
fused small-batch kernels (``eagle_hal.ops.triton.fused_linear``).

    python benchmarks/bench_fused_linear.py [--dtype bfloat16] [--rows 1,6,16,32]
        [--configs 16x128x4x3,16x128x4x3x4]

Per layer, attention excluded (its output is stood in for by q), SmolLM2-135M's geometry
(hidden 576, 9/3 heads x 64, intermediate 1536):

* unfused: add + RMSNorm, QKV GEMM, rotary, O GEMM, add + RMSNorm, gate/up GEMM,
  silu(gate) * up, down GEMM — 8 launches, as the model ran before;
* fused: [add +] RMSNorm + QKV + rotary, O, add + RMSNorm + gate/up + silu, down — 4.

Each layer has its own weights (30 layers hold ~210 MB, more than the L2 cache, as in the
model). A variant is captured in a CUDA graph over the ``--layers`` layers, replayed
``--repeats`` times and timed with CUDA events; the table gives the median device time per
layer in microseconds. ``--configs`` adds fused columns with forced launch configurations,
``BLOCK_N x BLOCK_K x warps x stages [x splits]`` (splits: split-K's upper bound, 1 when
left out) or ``gBLOCK_N x warps [x BLOCK_M] [p|d]`` (the matrix-vector kernel; ``p``:
prefetch, ``d``: dot mode, e.g. ``g16x8x16d``; see ``LaunchConfig.parse``); the default
list sweeps splits 1 to 6 over a few reduction tiles and warp counts.

Before it is timed, each variant's outputs over one layer are checked: close to the
unfused ones, bit for bit the same over repeated launches (a race between a tile's split
programs, or a counter left non-zero, shows here), and for up to 16 rows row 0 the same
alone as in the batch. A config that fails to compile or gives wrong outputs is reported
and skipped; one that is nondeterministic or row-variant is timed but marked ``!`` and
never named best. Needs a CUDA device and Triton.
"""

from __future__ import annotations

import argparse
import copy
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


    def first_row(self) -> Layers:
        """The same layers over row 0 alone (weights shared)."""
        one = copy.copy(self)
        one.x, one.residual = self.x[:1], self.residual[:1]
        one.cos, one.sin = self.cos[:1], self.sin[:1]
        return one


DEFAULT_CONFIGS = ",".join([
    "16x128x4x3", "16x512x4x3", "16x256x2x3", "16x256x8x3",  # no split
    *(f"16x128x4x3x{splits}" for splits in range(2, 7)),
    *(f"16x64x4x3x{splits}" for splits in range(2, 7)),
    "16x256x4x3x2", "16x256x4x3x3", "16x256x4x3x6",
    "16x128x2x3x3", "16x128x8x3x3", "16x64x2x3x4", "16x64x8x3x4", "16x128x4x2x3",
    "16x128x4x4x3", "32x128x4x3x3",
])
PROJECTION_FEATURES = {"qkv/o/gate_up": 576, "down": 1536}  # the reductions' lengths
GEMV_PROJECTIONS = [  # name, reduction length, paired tiles (gate/up, rotary halves)
    ("qkv", 576, True), ("o", 576, False), ("gate_up", 576, True), ("down", 1536, False),
]


def parse_config(text: str):  # noqa: ANN201 - a LaunchConfig
    """``BLOCK_N x BLOCK_K x warps x stages [x splits]``, or ``gBLOCK_N x warps [x BLOCK_M]
    [p|d]`` (the matrix-vector kernel)."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig  # noqa: PLC0415

    if not text.startswith("g") and len(text.split("x")) not in (4, 5):
        raise ValueError(f"config {text!r}: want BLOCK_NxBLOCK_KxWARPSxSTAGES[xSPLITS]")
    return LaunchConfig.parse(text)


def describe_splits(config) -> str:  # noqa: ANN001 - a LaunchConfig
    """The splits each reduction length actually takes under ``config`` (gemv: the
    projections whose tiles exceed the gemv limits and take the ``tl.dot`` kernel)."""
    from eagle_hal.ops.triton.fused_linear import _config_for, _split  # noqa: PLC0415

    if config.gemv:
        too_wide = [name for name, k, paired in GEMV_PROJECTIONS if not _config_for(
            torch.empty(1, k, device="meta", dtype=torch.bfloat16), k, paired, config).gemv]
        return "none (gemv: the whole reduction in one tile)" + (
            f"; over the gemv tile limit, on the tl.dot kernel: {', '.join(too_wide)}"
            if too_wide else "")
    return ", ".join(f"{name} (K={k}) {_split(k, config)[0]}"
                     for name, k in PROJECTION_FEATURES.items())


def check(one: Layers, expected: tuple[torch.Tensor, ...], config) -> str:  # noqa: ANN001
    """'' when ``config``'s outputs over one layer are right, deterministic and row-invariant;
    else what is wrong. Raises when they are not close to the unfused ``expected``."""
    first = one.fused(config)
    for e, f in zip(expected, first, strict=True):
        torch.testing.assert_close(f.float(), e.float(), atol=0.1, rtol=0.05)
    problems = []
    for _ in range(20):
        again = one.fused(config)
        if not all(torch.equal(a, b) for a, b in zip(first, again, strict=True)):
            problems.append("differs between launches")
            break
    rows = one.x.shape[0]
    if 1 < rows <= 16:
        alone = one.first_row().fused(config)
        if not all(torch.equal(a[0], b[0]) for a, b in zip(alone, first, strict=True)):
            problems.append("row 0 alone differs from row 0 in the batch")
    torch.cuda.synchronize()
    return "; ".join(problems)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--rows", default="1,2,6,16,32")
    parser.add_argument("--layers", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--configs", default=DEFAULT_CONFIGS)
    args = parser.parse_args()
    require_cuda("bench_fused_linear.py")
    dtype = getattr(torch, args.dtype)
    configs = {}  # text -> LaunchConfig, the unparsable ones reported and left out
    for text in (c for c in args.configs.split(",") if c):
        try:
            configs[text] = parse_config(text)
        except ValueError as error:
            print(f"skipped config {text}: {error}")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}, "
          f"{args.layers} layers; median us per layer (attention excluded)")
    for text, config in configs.items():
        print(f"  {text}: splits taken: {describe_splits(config)}")
    print(f"{'rows':>5} {'unfused':>9} {'fused':>9} {'ratio':>7}" + "".join(
        f" {c:>13}" for c in configs))
    notes, best = [], []
    for rows in (int(r) for r in args.rows.split(",")):
        layers = Layers(args.layers, dtype, rows)
        with torch.inference_mode():
            one = Layers(1, dtype, rows)
            expected, fused = one.unfused(), one.fused()
            for e, f in zip(expected, fused, strict=True):
                torch.testing.assert_close(f.float(), e.float(), atol=0.1, rtol=0.05)
            problem = check(one, expected, None)
            if problem:
                notes.append(f"rows {rows}, default config: {problem}")
            # one graph of all the layers; per layer = its time / the number of layers
            unfused_us = graph_median_us(layers.unfused, 1, args.repeats) / args.layers
            fused_us = graph_median_us(layers.fused, 1, args.repeats) / args.layers
            line = f"{rows:>5} {unfused_us:9.2f} {fused_us:9.2f} {unfused_us / fused_us:6.2f}x"
            timed = {"default": fused_us}  # config -> us, the sound ones only
            for text, config in configs.items():
                try:
                    problem = check(one, expected, config)
                    us = graph_median_us(lambda c=config, layers=layers: layers.fused(c), 1,
                                         args.repeats) / args.layers
                except Exception as error:  # noqa: BLE001 - report it, go on with the rest
                    notes.append(f"rows {rows}, {text}: {type(error).__name__}: "
                                 f"{str(error).splitlines()[0] if str(error) else ''}")
                    line += f" {'error':>13}"
                    torch.cuda.synchronize()
                    continue
                if problem:
                    notes.append(f"rows {rows}, {text}: {problem}")
                    line += f" {us:12.2f}!"
                else:
                    timed[text] = us
                    line += f" {us:13.2f}"
        print(line, flush=True)
        name = min(timed, key=timed.__getitem__)
        best.append(f"rows {rows:>2}: {name} {timed[name]:.2f} us "
                    f"(default {fused_us:.2f}, unfused {unfused_us:.2f})")
    print("best sound config per row count:")
    print("\n".join(f"  {b}" for b in best))
    if notes:
        print("problems:")
        print("\n".join(f"  {n}" for n in notes))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
