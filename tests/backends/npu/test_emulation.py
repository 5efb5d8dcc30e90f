"""The torch_npu operator emulations against a dense attention oracle and their documented
constraints. The oracle attends over each request's logical keys (kept before they are
scattered into randomly placed blocks) with an explicit visibility rule per mode."""

from __future__ import annotations

import random

import pytest
import torch

BLOCK = 128
HEAD_DIM = 16


def paged(logical: list[torch.Tensor], rng: random.Random, num_blocks: int = 12):
    """Scatter each request's ``[len, H_kv, D]`` keys into shuffled 128-slot blocks."""
    kv_heads = logical[0].shape[1]
    cache = torch.zeros(num_blocks, BLOCK, kv_heads * HEAD_DIM, dtype=logical[0].dtype)
    free = list(range(1, num_blocks))
    rng.shuffle(free)
    width = max(-(-t.shape[0] // BLOCK) for t in logical)
    table = torch.zeros(len(logical), max(width, 1), dtype=torch.int32)
    for b, keys in enumerate(logical):
        for i in range(-(-keys.shape[0] // BLOCK)):
            block = free.pop()
            table[b, i] = block
            part = keys[i * BLOCK : (i + 1) * BLOCK]
            cache[block, : part.shape[0]] = part.reshape(part.shape[0], -1)
    return cache, table


def oracle(q, keys, values, visible, scale):
    """One request: ``q`` [S, H, D], ``keys``/``values`` [L, H_kv, D], ``visible`` [S, L]."""
    group = q.shape[1] // keys.shape[1]
    k = keys.double().repeat_interleave(group, 1)
    v = values.double().repeat_interleave(group, 1)
    scores = torch.einsum("shd,lhd->hsl", q.double(), k) * scale
    scores = scores.masked_fill(~visible[None], float("-inf"))
    lse = torch.logsumexp(scores, -1)  # [H, S]
    return torch.einsum("hsl,lhd->shd", torch.softmax(scores, -1), v), lse


def make_batch(rng, q_lens, kv_lens, heads=4, kv_heads=2, dtype=torch.bfloat16):
    torch.manual_seed(rng.randint(0, 10**6))
    keys = [torch.randn(n, kv_heads, HEAD_DIM).to(dtype) for n in kv_lens]
    values = [torch.randn(n, kv_heads, HEAD_DIM).to(dtype) for n in kv_lens]
    q = torch.randn(len(q_lens), max(q_lens), heads, HEAD_DIM).to(dtype)
    return q, keys, values


def call(emu, q, k_cache, v_cache, table, q_lens, kv_lens, **kw):
    kw.setdefault("num_heads", q.shape[2])
    kw.setdefault("block_size", BLOCK)
    return emu(q, k_cache, v_cache, block_table=table, actual_seq_lengths=q_lens,
               actual_seq_lengths_kv=kv_lens, num_key_value_heads=2, scale=0.3,
               input_layout="BSND", softmax_lse_flag=True, **kw)


def test_paged_decode_with_gqa_matches_oracle(emulation):
    """One query per request over paged KV of ragged lengths (some past one block)."""
    rng = random.Random(1)
    kv_lens = [1, 130, 57, 300]
    q, keys, values = make_batch(rng, [1] * 4, kv_lens)
    (k_cache, table), (v_cache, _) = paged(keys, random.Random(2)), paged(values, random.Random(2))
    out, lse = call(emulation.FusedAttentionEmulation(), q, k_cache, v_cache, table,
                    None, kv_lens, sparse_mode=0)
    for b, n in enumerate(kv_lens):
        expected, expected_lse = oracle(q[b], keys[b], values[b],
                                        torch.ones(1, n, dtype=torch.bool), 0.3)
        torch.testing.assert_close(out[b].double(), expected, atol=2e-2, rtol=2e-2)
        torch.testing.assert_close(lse[b, :, :, 0].double(), expected_lse, atol=1e-3, rtol=1e-3)


def test_right_down_causal_with_ragged_queries(emulation):
    """sparse_mode 3: query i of a request sees keys up to kv_len - q_len + i."""
    rng = random.Random(3)
    q_lens, kv_lens = [5, 1, 3], [140, 9, 3]
    q, keys, values = make_batch(rng, q_lens, kv_lens)
    k_cache, table = paged(keys, random.Random(4))
    v_cache, _ = paged(values, random.Random(4))
    mask = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), 1)
    out, _ = call(emulation.FusedAttentionEmulation(), q, k_cache, v_cache, table, q_lens,
                  kv_lens, sparse_mode=3, atten_mask=mask)
    for b, (s, n) in enumerate(zip(q_lens, kv_lens, strict=True)):
        visible = torch.tensor([[j <= n - s + i for j in range(n)] for i in range(s)])
        expected, _ = oracle(q[b, :s], keys[b], values[b], visible, 0.3)
        torch.testing.assert_close(out[b, :s].double(), expected, atol=2e-2, rtol=2e-2)
        assert not out[b, s:].any()  # padding query rows come back as zeros


def test_explicit_mask_true_means_masked(emulation):
    """sparse_mode 0 with a [B, 1, S, KV] mask: true entries are not attended."""
    rng = random.Random(5)
    q_lens, kv_lens = [4, 4], [20, 133]
    q, keys, values = make_batch(rng, q_lens, kv_lens)
    k_cache, table = paged(keys, random.Random(6))
    v_cache, _ = paged(values, random.Random(6))
    mask = torch.rand(2, 1, 4, 140) < 0.4
    mask[..., 0] = False  # every row sees at least key 0
    out, _ = call(emulation.FusedAttentionEmulation(), q, k_cache, v_cache, table, q_lens,
                  kv_lens, sparse_mode=0, atten_mask=mask)
    for b, n in enumerate(kv_lens):
        expected, _ = oracle(q[b], keys[b], values[b], ~mask[b, 0, :, :n], 0.3)
        torch.testing.assert_close(out[b].double(), expected, atol=2e-2, rtol=2e-2)


def test_documented_constraints_are_enforced(emulation):
    """int32 tables, block size 128 for multi-token queries, half dtypes, the 2048 mask."""
    emu = emulation.FusedAttentionEmulation()
    rng = random.Random(7)
    q, keys, values = make_batch(rng, [2], [10])
    k_cache, table = paged(keys, rng)
    v_cache, _ = paged(values, rng)
    with pytest.raises(TypeError, match="int32"):
        call(emu, q, k_cache, v_cache, table.long(), [2], [10])
    with pytest.raises(ValueError, match="block_size 128"):
        small = k_cache.view(-1, 64, k_cache.shape[-1])
        call(emu, q, small, small, table, [2], [10], block_size=64)
    with pytest.raises(TypeError, match="float16/bfloat16"):
        call(emu, q.float(), k_cache.float(), v_cache.float(), table, [2], [10])
    with pytest.raises(ValueError, match="2048"):
        call(emu, q, k_cache, v_cache, table, [2], [10], sparse_mode=3,
             atten_mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(NotImplementedError):
        call(emu, q, k_cache, v_cache, table, [2], [10], pse_shift=torch.zeros(1))


def test_simulated_mask_defect_ignores_the_mask(emulation):
    """The defect switch really drops the mask (so conformance tests can detect it)."""
    rng = random.Random(8)
    q, keys, values = make_batch(rng, [3], [12])
    k_cache, table = paged(keys, random.Random(9))
    v_cache, _ = paged(values, random.Random(9))
    mask = torch.zeros(1, 1, 3, 12, dtype=torch.bool)
    mask[..., 6:] = True
    honest, _ = call(emulation.FusedAttentionEmulation(), q, k_cache, v_cache, table, [3], [12],
                     atten_mask=mask)
    broken, _ = call(emulation.FusedAttentionEmulation(ignore_mask_in_sparse_modes=(0,)), q,
                     k_cache, v_cache, table, [3], [12], atten_mask=mask)
    unmasked, _ = oracle(q[0], keys[0], values[0], torch.ones(3, 12, dtype=torch.bool), 0.3)
    torch.testing.assert_close(broken[0].double(), unmasked, atol=2e-2, rtol=2e-2)
    assert (honest - broken).abs().max() > 0.05


def test_reshape_and_cache_writes_int32_slots(emulation):
    """Tokens land at slot = block * 128 + offset; int64 slots are refused."""
    cache_k = torch.zeros(3, BLOCK, 2, HEAD_DIM)
    cache_v = torch.zeros(3, BLOCK, 2, HEAD_DIM)
    key, value = torch.randn(3, 2, HEAD_DIM), torch.randn(3, 2, HEAD_DIM)
    slots = torch.tensor([5, 130, 383], dtype=torch.int32)
    emulation.emulated_reshape_and_cache(key=key, value=value, key_cache=cache_k,
                                         value_cache=cache_v, slot_indices=slots)
    for t, slot in enumerate([5, 130, 383]):
        assert torch.equal(cache_k[slot // BLOCK, slot % BLOCK], key[t])
        assert torch.equal(cache_v[slot // BLOCK, slot % BLOCK], value[t])
    with pytest.raises(TypeError, match="int32"):
        emulation.emulated_reshape_and_cache(key=key, value=value, key_cache=cache_k,
                                             value_cache=cache_v, slot_indices=slots.long())
