"""The baseline paged attention kernel (``ops/triton/attention_kernels``: one query token
and head per program, K/V written beforehand; the reference point of
``benchmarks/bench_attention.py``) against a float64 recomputation over exactly the slots
each token may see (``paged_attention_scene``). Kernels run interpreted on CPU
(TRITON_INTERPRET=1, set by conftest) or on the device.
"""

from __future__ import annotations

import math

import pytest
import torch
from paged_attention_scene import Scene, causal_case, int32


def test_baseline_kernel_matches_recomputation():
    """The per-head kernel the benchmark compares against (K/V written beforehand) agrees
    with the same oracle on a ragged decode."""
    baseline = pytest.importorskip("eagle_hal.ops.triton.attention_kernels")
    scene = Scene(seed=80)
    plan, visible = causal_case(scene, [0, 19, 70], [1, 1, 1])
    q, k, v = scene.randn(3, 6, 16), scene.randn(3, 2, 16), scene.randn(3, 2, 16)
    out_cache_loc = torch.tensor(plan["out_cache_loc"], device=scene.dev)
    scene.store.write_kv(0, out_cache_loc, k, v)
    out = baseline.paged_attention(
        q, scene.store.k_buffer(0), scene.store.v_buffer(0), "NHD", scene.device_table.tensor,
        torch.tensor(plan["rows"], device=scene.dev),
        torch.tensor(plan["prefix_lens"], device=scene.dev), int32(plan["token_request"]),
        int32(plan["own_base"]), int32(plan["own_len"]), out_cache_loc, None, 0,
        1 / math.sqrt(scene.head_dim),
    )
    scene.check(out, q, visible)
