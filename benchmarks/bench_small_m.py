"""Time each projection shape at 1-64 rows on CUDA: the weight-streaming small-M kernel
(with and without programmatic dependent launch), the fused kernels' launch without it,
and cuBLAS.

    python benchmarks/bench_small_m.py [--rows 1,2,4,8,16,32,48,64] [--models smollm2,llama8b]
        [--repeats 30] [--configs s16x128x4,s32x256x4] [--out results.json]

Shapes: SmolLM2-135M (hidden 576, 9/3 heads of 64, intermediate 1536) and Llama-3.1-8B
(hidden 4096, 32/8 heads of 128, intermediate 14336), each projection with the fusions a
layer gives it: Q/K/V after the residual add and RMSNorm with rotary, O plain, gate/up
after the residual add and RMSNorm with SiLU * up, down plain. Columns, in us per
projection (median device time of a CUDA graph over enough copies of the weight to
exceed the L2 cache, divided by the copies):

* ``small_m``: ``small_m_kernel`` with its default tiles (``small_m_launch``), plain;
* ``small_m_pdl``: the same, launched with programmatic dependent launch (where the GPU
  has it, compute capability 9.0+);
* ``today``: the fused kernels' launch without the small-M kernel
  (``LaunchPolicy(small_m=False)``: the gemv kernel up to 4 rows, then ``tl.dot`` tiles);
* ``cublas``: ``F.linear`` alone (the GEMM without its norm, rotary or SiLU kernels);
* ``ratio``: ``small_m_pdl`` (else ``small_m``) over the 1-row time of ``today``.

``--configs`` adds small-M columns with other tiles (``sBLOCK_NxBLOCK_KxWARPS``). Each
fused output is checked against cuBLAS's (bf16 tolerance), and PDL on against off bit
for bit. ``--out`` writes every row as JSON. Needs a CUDA device and Triton.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).parent))
from bench_attention import graph_median_us, require_cuda  # noqa: E402

MODELS = {  # name -> hidden, heads, kv heads, head dim, intermediate
    "smollm2": (576, 9, 3, 64, 1536),
    "llama8b": (4096, 32, 8, 128, 14336),
}
L2_BYTES = 128 * 2**20  # weight copies per graph: at least this many bytes of weights


class Projection:
    """One projection of a model at ``rows`` rows, with ``copies`` weights."""

    def __init__(self, model: str, name: str, rows: int) -> None:
        hidden, heads, kv_heads, head_dim, inter = MODELS[model]
        self.name, self.heads, self.kv_heads = name, heads, kv_heads
        out_rows, features = {
            "qkv": ((heads + 2 * kv_heads) * head_dim, hidden), "o": (hidden, heads * head_dim),
            "gate_up": (2 * inter, hidden), "down": (hidden, inter)}[name]
        self.shape = (out_rows, features)
        g = torch.Generator(device="cuda").manual_seed(0)

        def rand(*shape: int, scale: float = 1.0) -> torch.Tensor:
            return (scale * torch.randn(shape, generator=g, device="cuda")).to(torch.bfloat16)

        self.copies = max(1, min(64, L2_BYTES // (out_rows * features * 2)))
        self.weights = [rand(out_rows, features, scale=features**-0.5)
                        for _ in range(self.copies)]
        self.x, self.residual = rand(rows, features), rand(rows, features)
        self.norm = 1 + rand(features, scale=0.1)
        angles = torch.rand(rows, head_dim // 2, generator=g, device="cuda") * 6.28
        angles = torch.cat([angles, angles], dim=-1)
        self.cos, self.sin = angles.cos().bfloat16(), angles.sin().bfloat16()

    def fused(self, weight: torch.Tensor, **options: object) -> torch.Tensor:
        from eagle_hal.ops.triton import fused_linear as fl  # noqa: PLC0415

        if self.name == "qkv":
            q, k, v, _ = fl.qkv_rotary(self.x, self.residual, self.norm, 1e-5, weight, None,
                                       self.cos, self.sin, self.heads, self.kv_heads,
                                       **options)
            return v
        if self.name == "gate_up":
            return fl.gate_up_silu(self.x, self.residual, self.norm, 1e-5, weight,
                                   **options)[0]
        return fl.linear(self.x, weight, **options)

    def all(self, call) -> object:  # noqa: ANN001
        return lambda: [call(w) for w in self.weights]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,2,4,8,16,32,48,64")
    parser.add_argument("--models", default="smollm2,llama8b")
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--configs", default="")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    require_cuda("bench_small_m.py")
    from eagle_hal.ops.triton.fused_linear_config import (  # noqa: PLC0415
        LaunchConfig,
        LaunchPolicy,
        small_m_launch,
    )

    pdl_ok = torch.cuda.get_device_capability()[0] >= 9
    extra = {text: LaunchConfig.parse(text) for text in args.configs.split(",") if text}
    today = LaunchPolicy(small_m=False)
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, bf16; "
          f"us per projection (PDL {'on' if pdl_ok else 'unavailable'})")
    header = (f"{'model':>8} {'proj':>7} {'rows':>4} {'small_m':>8} {'sm_pdl':>8} "
              f"{'today':>8} {'cublas':>8} {'ratio':>6}" + "".join(f" {c:>12}" for c in extra))
    print(header)
    results, notes = [], []
    for model in args.models.split(","):
        for name in ("qkv", "o", "gate_up", "down"):
            one_row_today = None
            for rows in (int(r) for r in args.rows.split(",")):
                p = Projection(model, name, rows)
                paired = name in ("qkv", "gate_up")
                config = small_m_launch(rows, p.shape[1], paired)
                row = {"model": model, "projection": name, "shape": list(p.shape),
                       "rows": rows, "copies": p.copies}
                with torch.inference_mode():
                    w = p.weights[0]
                    plain = p.fused(w, config=config)
                    if name in ("o", "down"):
                        torch.testing.assert_close(plain.float(), F.linear(p.x, w).float(),
                                                   atol=3e-2, rtol=3e-2)
                    row["small_m"] = graph_median_us(
                        p.all(lambda w, p=p, c=config: p.fused(w, config=c)), 1,
                        args.repeats) / p.copies
                    if pdl_ok:
                        pdl = p.fused(w, config=config, dependent_launch=True)
                        if not torch.equal(pdl, plain):
                            notes.append(f"{model} {name} rows {rows}: PDL output differs")
                        row["small_m_pdl"] = graph_median_us(
                            p.all(lambda w, p=p, c=config: p.fused(w, config=c,
                                                               dependent_launch=True)),
                            1, args.repeats) / p.copies
                    try:
                        row["today"] = graph_median_us(
                            p.all(lambda w, p=p: p.fused(w, policy=today)), 1,
                            args.repeats) / p.copies
                    except Exception as error:  # noqa: BLE001 - report it, go on
                        notes.append(f"{model} {name} rows {rows} today: {error}")
                        row["today"] = float("nan")
                    row["cublas"] = graph_median_us(
                        p.all(lambda w, p=p: F.linear(p.x, w)), 1, args.repeats) / p.copies
                    for text, c in extra.items():
                        row[text] = graph_median_us(
                            p.all(lambda w, p=p, c=c: p.fused(w, config=c,
                                                         dependent_launch=pdl_ok)),
                            1, args.repeats) / p.copies
                if rows == 1:
                    one_row_today = row["today"]
                best = row.get("small_m_pdl", row["small_m"])
                row["ratio"] = best / one_row_today if one_row_today else float("nan")
                results.append(row)
                print(f"{model:>8} {name:>7} {rows:>4} {row['small_m']:8.2f} "
                      f"{row.get('small_m_pdl', float('nan')):8.2f} {row['today']:8.2f} "
                      f"{row['cublas']:8.2f} {row['ratio']:6.2f}"
                      + "".join(f" {row[c]:12.2f}" for c in extra), flush=True)
                torch.cuda.empty_cache()
    if notes:
        print("problems:")
        print("\n".join(f"  {n}" for n in notes))
    if args.out:
        Path(args.out).write_text(json.dumps({
            "device": torch.cuda.get_device_name(), "torch": torch.__version__,
            "results": results, "problems": notes}, indent=1))
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
