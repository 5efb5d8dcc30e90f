"""EMULATION of aiter's ``paged_attention_v1``, written from aiter's sources. Not the real op.

Nothing here has run on AMD hardware or been compared with aiter. It implements, in plain
torch on any device, the documented semantics of the subset of arguments eagle-hal's ROCm
adapter uses, reads the caches the way the kernel does, checks the constraints that subset
is subject to, and raises ``NotImplementedError`` for anything outside it. Sources (ROCm/aiter
unless said otherwise):

* signature and argument order: ``aiter/ops/attention.py`` (``paged_attention_v1``);
* cache layouts: ``kv_cache_layout="NHD"`` is ``[num_blocks, block_size, num_kv_heads,
  head_size]``, ``"HND"`` is ``[num_blocks, num_kv_heads, block_size, head_size]``
  (``op_tests/test_pa_v1.py``); ``num_kv_heads``, ``block_size`` and the block, head and
  token strides are read from ``key_cache`` by the layout and used for *both* caches, the
  head dimension read as contiguous (``csrc/cpp_itfs/pa/pa_v1.py``,
  ``csrc/cpp_itfs/pa/pa_kernels.cuh``). The emulation reads both caches through those three
  strides too, so a value cache laid out unlike the key cache reads wrong, as on the GPU;
* semantics: per sequence, softmax(``scale`` * q.k) over the first ``context_lens[b]``
  tokens of its block list, query head ``h`` on KV head ``h // (num_heads / num_kv_heads)``
  (``run_torch`` in ``op_tests/test_pa_v1.py``); a sequence whose ``cu_query_lens`` gives it
  more than one query is skipped, its output rows left as they were, and a zero-length
  context gives zeros (``csrc/cpp_itfs/pa/pa_v1.cuh``);
* constraints: bfloat16/float16 query and output (``pa_v1.py`` raises otherwise), int32
  tables and lengths, partitions of 256 tokens with the block size dividing 256
  (``pa_kernels.cuh``: ``T_PAR_SIZE``; ``op_tests/test_pa_v1.py`` asserts the division), a
  uint8 workspace holding two float32 and one query-dtype array per (sequence, head,
  partition) (``csrc/cpp_itfs/pa/pa_v1.cpp.jinja``), head size >= 64 (vLLM,
  ``vllm/v1/attention/backends/rocm_aiter_fa.py``), 16-byte aligned rows (the kernel's
  16-byte loads). A context longer than ``max_context_len`` or a block table too narrow for
  a context is undefined on the GPU; the emulation raises ``ValueError`` for both.

The output is computed in float32 and rounded once to the output dtype (the kernel also
rounds its per-partition partial outputs to the query dtype, which the emulation does not).
"""

from __future__ import annotations

import types

import torch

__all__ = ["PagedAttentionV1Emulation", "emulated_aiter_module"]

_PARTITION = 256  # the kernel's T_PAR_SIZE
_HALF = (torch.bfloat16, torch.float16)


class PagedAttentionV1Emulation:
    """A callable with ``aiter.paged_attention_v1``'s signature (supported subset).

    ``calls`` records the host arguments of every call: ``max_context_len``, the batch size,
    the layout.
    """

    def __init__(self) -> None:
        self.calls: list[dict[str, object]] = []

    def __call__(self, out, workspace_buffer, query, key_cache, value_cache, scale,
                 block_tables, cu_query_lens, context_lens, max_context_len, alibi_slopes,
                 kv_cache_dtype, kv_cache_layout, logits_soft_cap, k_scale, v_scale,
                 fp8_out_scale=None, partition_size=256, mtp=1, sliding_window=0, q_scale=None):
        if alibi_slopes is not None or fp8_out_scale is not None or q_scale is not None:
            raise NotImplementedError("the emulation models no ALiBi and no fp8 scaling")
        if logits_soft_cap or sliding_window or mtp != 1:
            raise NotImplementedError("the emulation models no soft cap, no window, mtp=1")
        if kv_cache_dtype != "auto":
            raise NotImplementedError(
                f"the emulation models kv_cache_dtype 'auto', not {kv_cache_dtype!r}")
        if query.dtype not in _HALF or out.dtype not in _HALF:
            raise ValueError(f"Unsupported data type: query {query.dtype}, out {out.dtype}")
        if key_cache.dtype != query.dtype or value_cache.dtype != query.dtype:
            raise ValueError("kv_cache_dtype 'auto' needs caches of the query dtype")
        if partition_size != _PARTITION:
            raise ValueError(
                f"the kernel's partitions are {_PARTITION} tokens, got {partition_size}")
        for name, t in (("block_tables", block_tables), ("context_lens", context_lens)):
            if t.dtype != torch.int32:
                raise TypeError(f"{name} must be int32, got {t.dtype}")
        if cu_query_lens is not None and cu_query_lens.dtype != torch.int32:
            raise TypeError(f"cu_query_lens must be int32, got {cu_query_lens.dtype}")
        if workspace_buffer.dtype != torch.uint8:
            raise TypeError("workspace_buffer must be uint8")

        keys, values, block_size, num_kv_heads = _read_caches(
            key_cache, value_cache, kv_cache_layout)
        if _PARTITION % block_size:
            raise ValueError(f"block size {block_size} does not divide {_PARTITION}")
        total_q, num_heads, head_size = query.shape
        if keys.shape[-1] != head_size or out.shape != query.shape:
            raise ValueError(f"query {tuple(query.shape)}, out {tuple(out.shape)} and caches "
                             f"of head size {keys.shape[-1]} do not fit")
        if head_size < 64:
            raise ValueError(f"head size {head_size} < 64, which the kernel needs")
        if num_heads % num_kv_heads:
            raise ValueError(f"{num_heads} query heads for {num_kv_heads} KV heads")
        if query.stride(2) != 1 or query.stride(1) != head_size:
            raise ValueError("query rows must be [num_heads, head_size] contiguous")
        for name, t in (("query", query), ("key_cache", key_cache), ("value_cache", value_cache)):
            if t.data_ptr() % 16:
                raise ValueError(f"{name} is not 16-byte aligned")
        num_seqs = block_tables.shape[0]
        if context_lens.shape != (num_seqs,):
            raise ValueError(f"context_lens {tuple(context_lens.shape)} for {num_seqs} sequences")
        partitions = -(-max_context_len // _PARTITION)
        needed = num_seqs * num_heads * partitions * (head_size * query.element_size() + 8)
        if workspace_buffer.numel() < needed:
            raise ValueError(f"workspace of {workspace_buffer.numel()} bytes, needs {needed}")
        self.calls.append({"max_context_len": max_context_len, "num_seqs": num_seqs,
                           "kv_cache_layout": kv_cache_layout, "block_size": block_size})

        table = block_tables.cpu().long()
        lengths = context_lens.cpu().long().tolist()
        starts = (list(range(num_seqs + 1)) if cu_query_lens is None
                  else cu_query_lens.cpu().long().tolist())
        if len(starts) != num_seqs + 1:
            raise ValueError(f"cu_query_lens has {len(starts)} entries for {num_seqs} sequences")
        group = num_heads // num_kv_heads
        q_all = query.detach().cpu().float()
        for b in range(num_seqs):
            if starts[b + 1] - starts[b] > 1:
                continue  # the kernel returns without writing this sequence
            row, n = starts[b], lengths[b]
            if n == 0:
                out[row] = 0
                continue
            if n > partitions * _PARTITION:
                raise ValueError(f"context {n} past max_context_len {max_context_len}")
            if -(-n // block_size) > table.shape[1]:
                raise ValueError(f"context {n} needs more blocks than the table's {table.shape[1]}")
            positions = torch.arange(n)
            blocks = table[b, positions // block_size]
            if int(blocks.min()) < 0 or int(blocks.max()) >= keys.shape[0]:
                raise ValueError(f"block ids out of range in block_tables[{b}]")
            k = keys[blocks, positions % block_size].float().repeat_interleave(group, dim=1)
            v = values[blocks, positions % block_size].float().repeat_interleave(group, dim=1)
            scores = torch.einsum("hd,khd->hk", q_all[row], k) * scale  # [H, n]
            weights = torch.softmax(scores, dim=-1)
            out[row] = torch.einsum("hk,khd->hd", weights, v).to(out.dtype).to(out.device)
        return out


def _read_caches(key_cache, value_cache, layout):
    """Both caches as ``[num_blocks, block_size, H_kv, D]`` on the host, read through the key
    cache's block / token / head strides with a contiguous head dimension, as the kernel
    reads them; plus the block size and the number of KV heads."""
    if key_cache.dim() != 4 or value_cache.shape != key_cache.shape:
        raise ValueError(f"caches {tuple(key_cache.shape)} / {tuple(value_cache.shape)} are "
                         "not two 4-d tensors of one shape")
    if layout == "NHD":
        num_blocks, block_size, num_kv_heads, head_size = key_cache.shape
        block_stride, token_stride, head_stride = (key_cache.stride(i) for i in (0, 1, 2))
    elif layout == "HND":
        num_blocks, num_kv_heads, block_size, head_size = key_cache.shape
        block_stride, head_stride, token_stride = (key_cache.stride(i) for i in (0, 1, 2))
    else:
        raise ValueError(f"kv_cache_layout must be 'NHD' or 'HND', got {layout!r}")
    size = (num_blocks, block_size, num_kv_heads, head_size)
    stride = (block_stride, token_stride, head_stride, 1)
    for name, t in (("key_cache", key_cache), ("value_cache", value_cache)):
        if any((s * t.element_size()) % 16 for s in stride[:3]):
            raise ValueError(f"{name}'s strides {stride} are not whole 16-byte runs")
    keys = key_cache.as_strided(size, stride, key_cache.storage_offset()).cpu()
    values = value_cache.as_strided(size, stride, value_cache.storage_offset()).cpu()
    return keys, values, block_size, num_kv_heads


def emulated_aiter_module() -> types.ModuleType:
    """A module to install as ``sys.modules["aiter"]``: the emulated ``paged_attention_v1``
    and a version string that says it is an emulation."""
    module = types.ModuleType("aiter", "EMULATION of aiter (eagle-hal tests); not ROCm/aiter")
    module.__version__ = "0+emulation"
    module.paged_attention_v1 = PagedAttentionV1Emulation()
    return module
