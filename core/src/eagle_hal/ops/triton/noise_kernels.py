"""Triton kernel for seeded sampling noise: the reference's counter-based hash, fused.

The hash is 32-bit integer arithmetic held in int64 with products split in 16-bit halves,
exactly as ``eagle_hal.ops.reference_target`` computes it, so the draws are bit-identical
to the reference on every target. One program per request; blocks are masked powers of two.
"""

from __future__ import annotations

import triton
import triton.language as tl

__all__ = ["seeded_noise_kernel"]

MASK32 = tl.constexpr(0xFFFFFFFF)
DRAW_STREAM_HIGH = tl.constexpr(0x1B873593)  # the reference's stream constants
DRAW_STREAM_LOW = tl.constexpr(0x2545F491)
INDEX_SALT = tl.constexpr(0x9E3779B9)


@triton.jit
def _mul32(x, constant: tl.constexpr):
    low = (x & 0xFFFF) * constant
    high = ((x >> 16) * (constant & 0xFFFF)) << 16
    return (low + high) & MASK32


@triton.jit
def _mix32(x):
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


@triton.jit
def seeded_noise_kernel(
    seeds_ptr,  # [B] int64
    counters_ptr,  # [B] int64
    draws_ptr,  # out [B, W] int64, W = N + 1 (the nodes' coins, then the bonus draw)
    width,
    BLOCK: tl.constexpr,
):
    request = tl.program_id(0).to(tl.int64)
    seed = tl.load(seeds_ptr + request).to(tl.int64)
    counter = tl.load(counters_ptr + request).to(tl.int64)
    key = _mix32(seed & MASK32)
    key = _mix32(key ^ ((seed >> 32) & MASK32))
    key = _mix32(key ^ (counter & MASK32))
    lane_high = _mix32(key ^ DRAW_STREAM_HIGH)
    lane_low = _mix32(key ^ DRAW_STREAM_LOW)
    offsets = tl.arange(0, BLOCK).to(tl.int64)
    for start in range(0, width, BLOCK):
        index = start + offsets
        high = _mix32(_mix32(lane_high ^ index) ^ INDEX_SALT) & 0x3FFFFFFF
        low = _mix32(_mix32(lane_low ^ index) ^ INDEX_SALT)
        tl.store(draws_ptr + request * width + index, (high << 32) | low, mask=index < width)
