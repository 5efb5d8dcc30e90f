"""The mate ``flash_attn_with_kvcache`` EMULATION against an independent oracle: per-token
K/V lists written into mate's paged layout by hand and an explicit float64 softmax with the
causal limit spelled out per query. Also: it catches a wrong layout and refuses what mate
does not do."""

from __future__ import annotations

import pytest
import torch

HEADS, KV_HEADS, HEAD_DIM, PAGE = 4, 2, 32, 16


class Case:
    """Per-sequence K/V (length ``seqlen_k``) in random pages, ``seqlen_q`` ragged queries."""

    def __init__(self, seqlens, *, dtype=torch.bfloat16, seed=0, num_pages=48):
        gen = torch.Generator().manual_seed(seed)
        self.seqlens = seqlens  # [(seqlen_q, seqlen_k)]
        def tokens(n):
            return torch.randn(n, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)

        self.keys = [tokens(k) for _, k in seqlens]
        self.values = [tokens(k) for _, k in seqlens]
        self.q = torch.randn(sum(q for q, _ in seqlens), HEADS, HEAD_DIM, generator=gen).to(dtype)
        width = max(-(-k // PAGE) for _, k in seqlens)
        order = torch.randperm(num_pages, generator=gen)
        self.page_table = order[: len(seqlens) * width].view(len(seqlens), width).to(torch.int32)
        self.k_cache = torch.randn(num_pages, PAGE, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
        self.v_cache = torch.randn(num_pages, PAGE, KV_HEADS, HEAD_DIM, generator=gen).to(dtype)
        for b, (_, k) in enumerate(seqlens):
            for p in range(k):
                page = int(self.page_table[b, p // PAGE])
                self.k_cache[page, p % PAGE] = self.keys[b][p]
                self.v_cache[page, p % PAGE] = self.values[b][p]

    def expected(self, causal, scale):
        out = torch.zeros(self.q.shape, dtype=torch.float64)
        row = 0
        for b, (seqlen_q, seqlen_k) in enumerate(self.seqlens):
            for i in range(seqlen_q):
                limit = i + seqlen_k - seqlen_q if causal else seqlen_k - 1  # last visible key
                for h in range(HEADS):
                    kv = h // (HEADS // KV_HEADS)
                    if limit < 0:
                        continue  # no visible key: zeros
                    scores = torch.tensor([scale * float(self.q[row, h].double()
                                                         @ self.keys[b][j, kv].double())
                                           for j in range(limit + 1)], dtype=torch.float64)
                    weights = torch.softmax(scores, 0)
                    out[row, h] = sum(weights[j] * self.values[b][j, kv].double()
                                      for j in range(limit + 1))
                row += 1
        return out

    def call(self, op, *, causal=True, k_cache=None, **overrides):
        starts = [0]
        for q, _ in self.seqlens:
            starts.append(starts[-1] + q)
        kwargs = dict(
            cache_seqlens=torch.tensor([k for _, k in self.seqlens], dtype=torch.int32),
            page_table=self.page_table, cu_seqlens_q=torch.tensor(starts, dtype=torch.int32),
            max_seqlen_q=max(q for q, _ in self.seqlens), softmax_scale=0.2, causal=causal)
        kwargs.update(overrides)
        return op(self.q, self.k_cache if k_cache is None else k_cache, self.v_cache, **kwargs)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_matches_the_dense_oracle(mate_emulation, causal, dtype):
    """Ragged queries over longer, page-crossing contexts (bottom-right causal), and one
    sequence with more queries than keys (its first rows see nothing)."""
    case = Case([(1, 1), (5, 40), (3, 17), (4, 2)], dtype=dtype)
    out = case.call(mate_emulation.FlashAttnWithKVCacheEmulation(), causal=causal)
    torch.testing.assert_close(out.double(), case.expected(causal, 0.2), atol=2e-2, rtol=2e-2)


def test_lse_is_the_natural_log_sum_exp(mate_emulation):
    """return_softmax_lse gives (nheads, total_q) natural-log LSEs of the scaled scores."""
    case = Case([(1, 9)], dtype=torch.float16)
    _, lse = case.call(mate_emulation.FlashAttnWithKVCacheEmulation(), return_softmax_lse=True)
    scores = torch.stack([0.2 * case.keys[0][:, h // 2].double() @ case.q[0, h].double()
                          for h in range(HEADS)])
    expected = torch.logsumexp(scores, -1)
    torch.testing.assert_close(lse[:, 0].double(), expected, atol=1e-3, rtol=1e-3)


def test_a_transposed_cache_is_caught(mate_emulation):
    """The cache in HND order handed over as mate's NHD pages reads wrong or is refused."""
    case = Case([(2, 30), (1, 20)])
    hnd = case.k_cache.transpose(1, 2).contiguous().view(case.k_cache.shape)
    try:
        out = case.call(mate_emulation.FlashAttnWithKVCacheEmulation(), k_cache=hnd)
    except ValueError:
        return
    assert (out.double() - case.expected(True, 0.2)).abs().max() > 0.1


def test_refuses_what_mate_does_not_do(mate_emulation):
    """float32, int64 page tables, a missing max_seqlen_q, new K/V appended."""
    op = mate_emulation.FlashAttnWithKVCacheEmulation()
    with pytest.raises(ValueError, match="bfloat16/float16"):
        Case([(1, 4)], dtype=torch.float32).call(op)
    case = Case([(1, 4)])
    with pytest.raises(TypeError, match="int32"):
        case.call(op, page_table=case.page_table.long())
    with pytest.raises(ValueError, match="max_seqlen_q"):
        case.call(op, max_seqlen_q=None)
    with pytest.raises(NotImplementedError, match="'k'"):
        case.call(op, k=case.keys[0])
