"""The aiter ``paged_attention_v1`` EMULATION against an independent oracle: per-token K/V
lists and an explicit float64 softmax, written into the op's NHD and HND cache layouts by
hand. Also: it catches layout mistakes, and it refuses what the kernel does not do."""

from __future__ import annotations

import pytest
import torch

HEADS, KV_HEADS, HEAD_DIM, BLOCK = 8, 2, 64, 16


class Case:
    """Dense per-sequence K/V scattered into random blocks of an NHD cache."""

    def __init__(self, lengths, *, dtype=torch.bfloat16, seed=0, num_blocks=64):
        gen = torch.Generator().manual_seed(seed)
        self.lengths, self.dtype = lengths, dtype
        self.keys = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen).to(dtype) for n in lengths]
        self.values = [torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen).to(dtype) for n in lengths]
        self.query = torch.randn(len(lengths), HEADS, HEAD_DIM, generator=gen).to(dtype)
        width = max(-(-n // BLOCK) for n in lengths)
        order = torch.randperm(num_blocks, generator=gen)
        self.block_tables = order[: len(lengths) * width].view(len(lengths), width).to(torch.int32)
        self.nhd_k = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
        self.nhd_v = torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
        for b, n in enumerate(lengths):
            for p in range(n):  # token p: block table entry p // BLOCK, offset p % BLOCK
                block = int(self.block_tables[b, p // BLOCK])
                self.nhd_k[block, p % BLOCK] = self.keys[b][p]
                self.nhd_v[block, p % BLOCK] = self.values[b][p]

    def expected(self, scale):
        out = torch.zeros(len(self.lengths), HEADS, HEAD_DIM, dtype=torch.float64)
        for b, n in enumerate(self.lengths):
            for h in range(HEADS):
                kv = h // (HEADS // KV_HEADS)
                scores = [scale * float(self.query[b, h].double() @ self.keys[b][p, kv].double())
                          for p in range(n)]
                weights = torch.softmax(torch.tensor(scores, dtype=torch.float64), 0)
                for p in range(n):
                    out[b, h] += weights[p] * self.values[b][p, kv].double()
        return out

    def call(self, op, key_cache, value_cache, layout, *, cu_query_lens=None, out=None,
             max_context_len=None):
        batch = len(self.lengths)
        max_context_len = max_context_len or max(self.lengths)
        partitions = -(-max_context_len // 256)
        workspace = torch.empty(batch * HEADS * partitions * (HEAD_DIM * 2 + 8), dtype=torch.uint8)
        out = torch.zeros_like(self.query) if out is None else out
        one = torch.ones(1)
        if cu_query_lens is None:
            cu_query_lens = torch.arange(batch + 1, dtype=torch.int32)
        return op(out, workspace, self.query, key_cache, value_cache, HEAD_DIM**-0.5,
                  self.block_tables, cu_query_lens, torch.tensor(self.lengths, dtype=torch.int32),
                  max_context_len, None, "auto", layout, 0.0, one, one, None, 256)


@pytest.mark.parametrize("layout", ["NHD", "HND"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_the_dense_oracle(aiter_emulation, layout, dtype):
    """Ragged contexts (one token, a partial block, two partitions), GQA, both layouts."""
    case = Case([1, 17, 300], dtype=dtype)
    k, v = case.nhd_k, case.nhd_v
    if layout == "HND":
        k, v = k.permute(0, 2, 1, 3).contiguous(), v.permute(0, 2, 1, 3).contiguous()
    out = case.call(aiter_emulation.PagedAttentionV1Emulation(), k, v, layout)
    torch.testing.assert_close(out.double(), case.expected(HEAD_DIM**-0.5), atol=2e-2, rtol=2e-2)


def test_a_cache_labelled_with_the_wrong_layout_is_caught(aiter_emulation):
    """The NHD cache transposed to HND but still declared NHD: shapes read as 2 tokens of
    16 heads per block, which the op refuses or computes wrongly, never silently right."""
    case = Case([5, 40])
    k = case.nhd_k.permute(0, 2, 1, 3).contiguous()
    v = case.nhd_v.permute(0, 2, 1, 3).contiguous()
    op = aiter_emulation.PagedAttentionV1Emulation()
    try:
        out = case.call(op, k, v, "NHD")
    except ValueError:
        return
    assert not torch.allclose(out.double(), case.expected(HEAD_DIM**-0.5), atol=5e-2)


def test_value_cache_is_read_with_the_key_caches_strides(aiter_emulation):
    """The kernel takes strides from key_cache only: a value cache of another memory
    layout (same shape, HND strides) reads wrong values."""
    case = Case([20, 33])
    # NHD shape, HND memory
    v_other = case.nhd_v.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)
    assert torch.equal(v_other, case.nhd_v)
    out = case.call(aiter_emulation.PagedAttentionV1Emulation(), case.nhd_k, v_other, "NHD")
    assert (out.double() - case.expected(HEAD_DIM**-0.5)).abs().max() > 0.1


def test_multi_query_sequences_are_skipped_and_empty_contexts_are_zero(aiter_emulation):
    """A sequence with two queries is left unwritten (the kernel returns); length 0 gives 0."""
    case = Case([0, 9])
    sentinel = torch.full_like(case.query, 7.0)
    cu = torch.tensor([0, 1, 3], dtype=torch.int32)  # sequence 1 claims two queries
    case.query = torch.cat([case.query, case.query[1:]])  # three query rows
    out = case.call(aiter_emulation.PagedAttentionV1Emulation(), case.nhd_k, case.nhd_v, "NHD",
                    cu_query_lens=cu, out=torch.cat([sentinel, sentinel[1:]]), max_context_len=9)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.equal(out[1:], torch.full_like(out[1:], 7.0))


def test_refuses_what_the_kernel_does_not_do(aiter_emulation):
    """float32, int64 tables, a context past max_context_len, a too small workspace."""
    op = aiter_emulation.PagedAttentionV1Emulation()
    case = Case([300])
    with pytest.raises(ValueError, match="past max_context_len"):
        case.call(op, case.nhd_k, case.nhd_v, "NHD", max_context_len=100)
    case32 = Case([4], dtype=torch.float32)
    with pytest.raises(ValueError, match="Unsupported data type"):
        case32.call(op, case32.nhd_k, case32.nhd_v, "NHD")
    case.block_tables = case.block_tables.long()
    with pytest.raises(TypeError, match="int32"):
        case.call(op, case.nhd_k, case.nhd_v, "NHD")
    small = Case([4])
    with pytest.raises(ValueError, match="workspace"):
        op(torch.empty_like(small.query), torch.empty(8, dtype=torch.uint8), small.query,
           small.nhd_k, small.nhd_v, 0.1, small.block_tables, None,
           torch.tensor([4], dtype=torch.int32), 4, None, "auto", "NHD", 0.0, None, None)
