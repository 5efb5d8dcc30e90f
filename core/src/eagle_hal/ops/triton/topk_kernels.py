"""Triton softmax + top-k over a vocabulary: the draft's next-token candidates in one pass.

``softmax_topk(logits, k)`` equals ``torch.softmax(logits.float(), -1).topk(k)`` for
``k <= MAX_K``, in two launches and without a host sync (it captures into a device graph):

1. one program per (row, chunk of the vocabulary) reads its logits once and writes the
   chunk's maximum, its sum of ``exp(x - max)`` in float32 and its own top-k;
2. one program per row merges the chunks: the row maximum ``M``, the normaliser
   ``sum_c sum_c * exp(max_c - M)``, the top-k of the chunks' candidates and their
   probabilities ``exp(x - M) / normaliser``.

The global top-k lies in the union of the chunks' top-ks, so the merge reads
``num_chunks * k`` candidates instead of the vocabulary. Each candidate is one int64 key
that orders by value, then by the smaller index: the float's bits mapped to an order-keeping
signed integer in the high half, ``2**31 - 1 - index`` in the low half. One ``max`` per round
then picks the next candidate and resolves ties (to the smallest index, deterministically),
and keys are distinct, so a picked key is removed by equality. ``-inf`` logits are ordinary
keys (probability 0); a row of only ``-inf`` gives NaN probabilities, as torch's softmax does.
Logits must not be NaN. Under ``TRITON_INTERPRET=1`` the kernels run on CPU tensors.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from eagle_hal.ops.reference_checks import next_power_of_2

__all__ = ["MAX_K", "softmax_topk"]

MAX_K = 16  # larger k falls back to torch's softmax and topk
_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
# Vocabulary per phase-1 program. On an H200, [1..64, 49152] bfloat16, k 1..16, 2048 was
# the fastest of 512..8192 or within 5% of it (benchmarks/bench_softmax_topk.py --chunks):
# shorter chunks lengthen the merge, longer ones leave SMs idle for few rows.
_CHUNK = 2048
_NO_KEY = tl.constexpr(-(2**63))  # below every real key: padding and picked candidates


@triton.jit
def _order_keys(values, indices):
    """Int64 keys ordering float32 ``values`` descending, ties by ascending ``indices``."""
    values = tl.where(values == 0.0, 0.0, values)  # -0.0 ties with +0.0, as in torch
    bits = values.to(tl.int32, bitcast=True)
    # negative floats: flip the magnitude bits so that larger floats give larger integers
    ordered = bits ^ ((bits >> 31) & 0x7FFFFFFF)
    return (ordered.to(tl.int64) << 32) | (2147483647 - indices).to(tl.int64)


@triton.jit
def _key_value(key):
    """The float32 value a key was made from."""
    ordered = (key >> 32).to(tl.int32)
    bits = ordered ^ ((ordered >> 31) & 0x7FFFFFFF)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _key_index(key):
    """The vocabulary index a key was made from."""
    return (2147483647 - key.to(tl.int32)).to(tl.int64)  # truncation keeps the low half


@triton.jit
def _chunk_partials_kernel(
    logits_ptr,  # [n, V], row stride logits_stride, last dimension contiguous
    chunk_max_ptr,  # out [n, num_chunks] float32
    chunk_sum_ptr,  # out [n, num_chunks] float32: sum of exp(x - chunk max)
    chunk_keys_ptr,  # out [n, num_chunks, K] int64: the chunk's top-k keys, descending
    logits_stride,
    vocab,
    num_chunks,
    K: tl.constexpr,
    CHUNK: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunk = tl.program_id(1)
    indices = chunk * CHUNK + tl.arange(0, CHUNK)
    valid = indices < vocab
    x = tl.load(logits_ptr + row * logits_stride + indices, mask=valid, other=float("-inf"))
    x = x.to(tl.float32)
    chunk_max = tl.max(x, axis=0)
    shift = tl.where(chunk_max == float("-inf"), 0.0, chunk_max)  # a chunk of only -inf sums 0
    chunk_sum = tl.sum(tl.exp(x - shift), axis=0)
    partial = row * num_chunks + chunk
    tl.store(chunk_max_ptr + partial, chunk_max)
    tl.store(chunk_sum_ptr + partial, chunk_sum)
    keys = tl.where(valid, _order_keys(x, indices), _NO_KEY)
    for i in tl.static_range(K):
        best = tl.max(keys, axis=0)
        tl.store(chunk_keys_ptr + partial * K + i, best)
        keys = tl.where(keys == best, _NO_KEY, keys)


@triton.jit
def _merge_chunks_kernel(
    chunk_max_ptr,  # [n, num_chunks] float32
    chunk_sum_ptr,  # [n, num_chunks] float32
    chunk_keys_ptr,  # [n, num_chunks * K] int64
    probs_ptr,  # out [n, K] float32
    ids_ptr,  # out [n, K] int64
    num_chunks,
    K: tl.constexpr,
    BLOCK_CHUNKS: tl.constexpr,
    BLOCK_CANDIDATES: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    chunks = tl.arange(0, BLOCK_CHUNKS)
    in_row = chunks < num_chunks
    chunk_max = tl.load(chunk_max_ptr + row * num_chunks + chunks, mask=in_row,
                        other=float("-inf"))
    chunk_sum = tl.load(chunk_sum_ptr + row * num_chunks + chunks, mask=in_row, other=0.0)
    row_max = tl.max(chunk_max, axis=0)
    shift = tl.where(row_max == float("-inf"), 0.0, row_max)
    total = tl.sum(chunk_sum * tl.exp(chunk_max - shift), axis=0)
    candidates = tl.arange(0, BLOCK_CANDIDATES)
    num_candidates = num_chunks * K
    keys = tl.load(chunk_keys_ptr + row * num_candidates + candidates,
                   mask=candidates < num_candidates, other=_NO_KEY)
    for i in tl.static_range(K):
        best = tl.max(keys, axis=0)
        keys = tl.where(keys == best, _NO_KEY, keys)
        prob = tl.exp(_key_value(best) - row_max) / total  # NaN for a row of only -inf
        tl.store(probs_ptr + row * K + i, prob)
        tl.store(ids_ptr + row * K + i, _key_index(best))


def _chunk_launch(vocab: int, chunk: int | None) -> tuple[int, int]:
    """``(CHUNK, warps)``, at most the vocabulary rounded up to a power of two."""
    if chunk is None:
        chunk = _CHUNK
    elif chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"chunk must be a power of two >= 16, got {chunk}")
    chunk = max(16, min(chunk, next_power_of_2(vocab)))
    return chunk, 4 if chunk <= 2048 else 8


def softmax_topk(
    logits: torch.Tensor, k: int, *, chunk: int | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` largest of ``softmax(logits.float(), -1)`` and their ids, descending.

    ``logits`` ``[..., V]`` float16/bfloat16/float32 (rows may be strided; the last
    dimension is made contiguous if it is not). Returns ``(probs [..., k] float32,
    ids [..., k] int64)``; equal values go to the smaller id. Raises ``ValueError`` unless
    ``1 <= k <= V``. Beyond ``MAX_K``, or for another dtype, computes torch's softmax and
    topk instead. ``chunk`` (a power of two, for benchmarks) overrides the vocabulary slice
    one program reads."""
    if logits.ndim == 0:
        raise ValueError("logits must be [..., V], got a scalar")
    vocab = logits.shape[-1]
    if not 1 <= k <= vocab:
        raise ValueError(f"k must be in [1, {vocab}] (the vocabulary), got {k}")
    if k > MAX_K or logits.dtype not in _DTYPES or vocab >= 2**31:
        return torch.softmax(logits.float(), dim=-1).topk(k, dim=-1)
    out_shape = (*logits.shape[:-1], k)
    if logits.stride(-1) != 1:
        logits = logits.contiguous()
    logits = logits.reshape(-1, vocab)  # [n, V], a view when the rows allow
    rows = logits.shape[0]
    probs = torch.empty((rows, k), dtype=torch.float32, device=logits.device)
    ids = torch.empty((rows, k), dtype=torch.int64, device=logits.device)
    if rows == 0:
        return probs.view(out_shape), ids.view(out_shape)
    chunk, warps = _chunk_launch(vocab, chunk)
    num_chunks = triton.cdiv(vocab, chunk)
    chunk_max = torch.empty((rows, num_chunks), dtype=torch.float32, device=logits.device)
    chunk_sum = torch.empty_like(chunk_max)
    chunk_keys = torch.empty((rows, num_chunks, k), dtype=torch.int64, device=logits.device)
    _chunk_partials_kernel[(rows, num_chunks)](
        logits, chunk_max, chunk_sum, chunk_keys, logits.stride(0), vocab, num_chunks,
        K=k, CHUNK=chunk, num_warps=warps,
    )
    _merge_chunks_kernel[(rows,)](
        chunk_max, chunk_sum, chunk_keys, probs, ids, num_chunks, K=k,
        BLOCK_CHUNKS=next_power_of_2(num_chunks),
        BLOCK_CANDIDATES=next_power_of_2(num_chunks * k), num_warps=4,
    )
    return probs.view(out_shape), ids.view(out_shape)
