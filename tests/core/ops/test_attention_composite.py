"""The LSE-merge composite: exact merge, dense tree part, paged prefix part, and the
composite backend against the direct tree-masked path and an explicit path oracle."""

from __future__ import annotations

import math
import random

import pytest
import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, PageAllocator, RequestTokenTable
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_composite import (
    CompositeTreeAttentionBackend,
    dense_tree_attention,
    merge_attention_states,
    paged_prefix_attention,
)
from eagle_hal.ops.attention_reference import TorchAttentionBackend

ATOL = 2e-5
HEAD_DIM = 8


def softmax_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float
                      ) -> tuple[torch.Tensor, torch.Tensor]:
    """One query ``q`` [D] over keys ``k``/``v`` [n, D], float64: (out [D], natural lse)."""
    scores = (k.double() @ q.double()) * scaling
    if scores.numel() == 0:
        empty_lse = torch.tensor(-math.inf, dtype=torch.float64)
        return torch.zeros(q.shape[0], dtype=torch.float64), empty_lse
    return torch.softmax(scores, 0) @ v.double(), torch.logsumexp(scores, 0)


def test_merge_equals_softmax_over_the_union() -> None:
    """Split random keys into two disjoint parts (one may be empty); merge is exact."""
    rng = random.Random(0)
    torch.manual_seed(0)
    for _ in range(30):
        n = rng.randint(1, 20)
        q, k, v = torch.randn(HEAD_DIM) * 2, torch.randn(n, HEAD_DIM), torch.randn(n, HEAD_DIM)
        part = torch.tensor([rng.random() < 0.5 for _ in range(n)])
        if rng.random() < 0.2:
            part[:] = bool(rng.random() < 0.5)  # one side empty
        out_a, lse_a = softmax_attention(q, k[part], v[part], 0.7)
        out_b, lse_b = softmax_attention(q, k[~part], v[~part], 0.7)
        out, lse = merge_attention_states(out_a[None].float(), lse_a[None].float(),
                                          out_b[None].float(), lse_b[None].float())
        expected_out, expected_lse = softmax_attention(q, k, v, 0.7)
        torch.testing.assert_close(out[0].double(), expected_out, atol=1e-5, rtol=0)
        torch.testing.assert_close(lse[0].double(), expected_lse, atol=1e-5, rtol=0)


def test_merge_of_two_empty_parts_is_zero() -> None:
    inf = torch.full((3,), -math.inf)
    out, lse = merge_attention_states(torch.zeros(3, 4), inf, torch.zeros(3, 4), inf)
    assert torch.equal(out, torch.zeros(3, 4)) and torch.isneginf(lse).all()


def test_dense_tree_attention_against_loop() -> None:
    """GQA: head h reads KV head h // 2; each row over its visible columns only."""
    torch.manual_seed(1)
    q, k, v = torch.randn(2, 5, 4, HEAD_DIM), torch.randn(2, 5, 2, HEAD_DIM), torch.randn(
        2, 5, 2, HEAD_DIM)
    mask = torch.rand(2, 5, 5) < 0.5
    mask |= torch.eye(5, dtype=torch.bool)  # every node sees itself
    out, lse = dense_tree_attention(q, k, v, mask, 0.5)
    for b in range(2):
        for i in range(5):
            for h in range(4):
                cols = mask[b, i]
                e_out, e_lse = softmax_attention(q[b, i, h], k[b, cols, h // 2],
                                                 v[b, cols, h // 2], 0.5)
                torch.testing.assert_close(out[b, i, h].double(), e_out, atol=ATOL, rtol=0)
                torch.testing.assert_close(lse[b, i, h].double(), e_lse, atol=ATOL, rtol=0)


def test_paged_prefix_attention_against_loop_and_empty_prefix() -> None:
    torch.manual_seed(2)
    num_slots = 40
    k_buffer, v_buffer = torch.randn(num_slots, 1, HEAD_DIM), torch.randn(num_slots, 1, HEAD_DIM)
    req_to_token = torch.randperm(num_slots)[:30].view(3, 10)  # non-contiguous slots
    prefix_lens = [4, 0, 10]
    q = torch.randn(3, 2, 2, HEAD_DIM)
    out, lse = paged_prefix_attention(
        q, k_buffer, v_buffer, req_to_token=req_to_token,
        table_rows=torch.tensor([2, 0, 1]), prefix_lens=torch.tensor(prefix_lens),
        max_prefix_len=10, scaling=0.3)
    for b, (row, n) in enumerate(zip([2, 0, 1], prefix_lens, strict=True)):
        slots = req_to_token[row, :n]
        for i in range(2):
            for h in range(2):
                e_out, e_lse = softmax_attention(q[b, i, h], k_buffer[slots, 0],
                                                 v_buffer[slots, 0], 0.3)
                torch.testing.assert_close(out[b, i, h].double(), e_out, atol=ATOL, rtol=0)
                torch.testing.assert_close(lse[b, i, h].double(), e_lse, atol=ATOL, rtol=0)


# -- the composite backend ----------------------------------------------------------------


def random_tree_block(rng: random.Random, n: int) -> list[list[bool]]:
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    block = [[False] * n for _ in range(n)]
    for node in range(n):
        a = node
        while a != -1:
            block[node][a] = True
            a = parents[a]
    return block


def setup(page_size: int, order: str, prefix_lens: list[int], n: int):
    layout = KVLayout(order=order, page_size=page_size)
    allocator = PageAllocator(64, page_size)
    pages = allocator.allocate(allocator.num_free_pages)
    random.Random(page_size).shuffle(pages)
    allocator.free(pages)
    table = RequestTokenTable(allocator, 4, 128)
    store = KVStorage.for_allocator(allocator, num_layers=1, num_kv_heads=2, head_dim=HEAD_DIM,
                                    layout=layout, dtype=torch.float32, device="cpu")
    device_table = DeviceTokenTable(table, layout, "cpu")
    rows, out_cache_loc = [], []
    for prefix in prefix_lens:
        row = table.add_request()
        rows.append(row)
        table.reserve(row, prefix + n)
        slots = table.slots(row, 0, prefix + n)
        store.write_kv(0, torch.tensor(slots[:prefix]), torch.randn(prefix, 2, HEAD_DIM),
                       torch.randn(prefix, 2, HEAD_DIM))
        out_cache_loc += slots[prefix:]
    device_table.sync()
    config = AttentionConfig(4, 2, HEAD_DIM, 1, 1 / math.sqrt(HEAD_DIM), store,
                             device_table.tensor)
    return config, rows, out_cache_loc


def verify_batch(rows, prefix_lens, n, out_cache_loc, tree_mask) -> ForwardBatch:
    total = len(out_cache_loc)
    return ForwardBatch(
        mode=ForwardMode.TARGET_VERIFY, input_ids=torch.zeros(total, dtype=torch.int64),
        positions=torch.zeros(total, dtype=torch.int64), table_rows=torch.tensor(rows),
        prefix_lens=torch.tensor(prefix_lens), extend_lens=torch.tensor([n] * len(rows)),
        out_cache_loc=torch.tensor(out_cache_loc), prefix_lens_cpu=tuple(prefix_lens),
        extend_lens_cpu=(n,) * len(rows), tree_mask=tree_mask)


def run(backend, batch, q, k, v):
    batch.attn_metadata = backend.plan(batch)
    return backend.forward(0, q, k, v, batch)


@pytest.mark.parametrize(("page_size", "order"), [(1, "NHD"), (16, "HND"), (128, "NHD")])
@pytest.mark.parametrize("mask_mode", [TreeMaskMode.TREE_BLOCK, TreeMaskMode.BIT_PACKED])
def test_composite_equals_direct_tree_masked_path(page_size: int, order: str,
                                                  mask_mode: str) -> None:
    """Same tree, same K/V: the composite verify equals TorchAttentionBackend's verify."""
    rng = random.Random(page_size)
    torch.manual_seed(page_size)
    prefix_lens, n = [11, 0, 30], 7  # includes an empty prefix (LSE -inf part)
    config, rows, out_cache_loc = setup(page_size, order, prefix_lens, n)
    blocks = [random_tree_block(rng, n) for _ in rows]
    block_mask = torch.tensor(blocks)  # [B, N, N]
    if mask_mode == TreeMaskMode.BIT_PACKED:
        tree_mask = torch.tensor([[sum(1 << j for j in range(n) if r[j]) for r in b]
                                  for b in blocks])
    else:
        tree_mask = block_mask
    q, k, v = (torch.randn(len(out_cache_loc), 4, HEAD_DIM),
               torch.randn(len(out_cache_loc), 2, HEAD_DIM),
               torch.randn(len(out_cache_loc), 2, HEAD_DIM))
    composite = CompositeTreeAttentionBackend(config, tree_mask_mode=mask_mode)
    direct = TorchAttentionBackend(config, tree_mask_mode=TreeMaskMode.TREE_BLOCK)
    out = run(composite, verify_batch(rows, prefix_lens, n, out_cache_loc, tree_mask), q, k, v)
    expected = run(direct, verify_batch(rows, prefix_lens, n, out_cache_loc, block_mask), q, k, v)
    torch.testing.assert_close(out, expected, atol=ATOL, rtol=0)
    # And against the explicit path oracle for one node per request.
    store = config.kv_store
    for b, row in enumerate(rows):
        node = n - 1
        seen = [c for c in range(n) if blocks[b][node][c]]
        prefix_slots = config.req_to_token[row, :prefix_lens[b]]
        for h in range(4):
            keys = [store.k_buffer(0)[s, h // 2] if order == "NHD"
                    else store.k_buffer(0)[h // 2, s] for s in prefix_slots.tolist()]
            values = [store.v_buffer(0)[s, h // 2] if order == "NHD"
                      else store.v_buffer(0)[h // 2, s] for s in prefix_slots.tolist()]
            keys += [k[b * n + c, h // 2] for c in seen]
            values += [v[b * n + c, h // 2] for c in seen]
            e_out, _ = softmax_attention(q[b * n + node, h], torch.stack(keys),
                                         torch.stack(values), config.scaling)
            torch.testing.assert_close(out[b * n + node, h].double(), e_out, atol=ATOL, rtol=0)


def test_other_modes_are_delegated_and_full_masks_refused() -> None:
    config, rows, out_cache_loc = setup(4, "NHD", [3], 2)
    composite = CompositeTreeAttentionBackend(config)
    assert isinstance(composite.inner, TorchAttentionBackend)
    batch = verify_batch(rows, [3], 2, out_cache_loc, None)
    batch.mode = ForwardMode.DRAFT_EXTEND
    q, k, v = torch.randn(2, 4, HEAD_DIM), torch.randn(2, 2, HEAD_DIM), torch.randn(2, 2, HEAD_DIM)
    out = run(composite, batch, q, k, v)
    expected = run(composite.inner, batch, q, k, v)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    with pytest.raises(ValueError, match="tree_block or bit_packed"):
        CompositeTreeAttentionBackend(config, tree_mask_mode=TreeMaskMode.FULL)
