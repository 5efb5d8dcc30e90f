"""The NPU glue functions against independent oracles: the engine's integer page table for
block tables, explicit loops for masks, and aliasing checks for cache views."""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, PageAllocator, RequestTokenTable
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal_npu import glue


def test_block_table_lists_each_requests_pages_in_order():
    """block_table[b, i] is the i-th page the integer table gave request b (int32)."""
    rng = random.Random(0)
    allocator = PageAllocator(num_pages=40, page_size=128)
    table = RequestTokenTable(allocator, max_requests=6, max_context=2048)
    rows, lengths = [], [1, 128, 129, 700, 5]
    for _n in lengths:  # interleave growth so pages are not contiguous per request
        rows.append(table.add_request())
    for step in range(1, 9):
        for row, n in zip(rows, lengths, strict=True):
            if rng.random() < 0.5 or step == 8:
                table.reserve(row, max(table.length(row), step * n // 8))
    device_table = DeviceTokenTable(table, KVLayout(page_size=128, slot_dtype="int32"), "cpu")
    device_table.sync()
    got = glue.block_table(device_table.tensor, torch.tensor(rows), max(lengths), 128)
    assert got.dtype == torch.int32 and got.shape == (5, 6)
    for b, (row, _n) in enumerate(zip(rows, lengths, strict=True)):
        pages = table.pages(row)
        assert got[b, : len(pages)].tolist() == list(pages)[: got.shape[1]]


def test_tree_verify_mask_against_loop():
    """Prefix visible, tree columns as the tree block says, beyond prefix + N masked."""
    torch.manual_seed(1)
    prefix_lens, n, width = (3, 0, 7), 4, 12
    tree = torch.rand(3, n, n) < 0.5
    mask = glue.tree_verify_mask(tree, prefix_lens, width)
    assert mask.shape == (3, 1, n, width) and mask.dtype == torch.bool
    for b, p in enumerate(prefix_lens):
        for i in range(n):
            for j in range(width):
                visible = j < p or (j < p + n and bool(tree[b, i, j - p]))
                assert bool(mask[b, 0, i, j]) == (not visible)
    with pytest.raises(ValueError, match="kv_width"):
        glue.tree_verify_mask(tree, prefix_lens, 9)


def test_compressed_causal_mask_is_strict_upper_triangle():
    mask = glue.compressed_causal_mask()
    assert mask.shape == (2048, 2048) and mask.dtype == torch.bool
    i, j = 5, 9
    assert mask[i, j] and not mask[j, i] and not mask[i, i]
    assert int(mask.sum()) == 2048 * 2047 // 2


def test_paged_cache_view_aliases_storage():
    """Both views alias the NHD buffer: a write through one is seen at slot b * 128 + o."""
    buffer = torch.zeros(256, 2, 4)
    blocks, flat = glue.paged_cache_view(buffer, 128)
    assert blocks.shape == (2, 128, 2, 4) and flat.shape == (2, 128, 8)
    blocks[1, 3] = 7.0
    assert buffer[131].eq(7).all() and flat[1, 3].eq(7).all()
    with pytest.raises(ValueError, match="whole number"):
        glue.paged_cache_view(torch.zeros(200, 2, 4), 128)
    with pytest.raises(ValueError, match="contiguous"):
        glue.paged_cache_view(torch.zeros(2, 256, 4).transpose(0, 1), 128)


def test_graph_update_payload_one_entry_per_layer_with_padding():
    payload = glue.graph_update_payload([5, 9], num_attention_calls=3, padded_batch_size=4)
    assert payload == [{"actual_seq_lengths_kv": [5, 9, 1, 1]}] * 3
    payload[0]["actual_seq_lengths_kv"].append(0)  # entries are independent lists
    assert payload[1]["actual_seq_lengths_kv"] == [5, 9, 1, 1]
    with pytest.raises(ValueError):
        glue.graph_update_payload([5, 9], 1, padded_batch_size=1)


def test_slots_and_lengths():
    assert glue.to_npu_slots(torch.tensor([3, 4])).dtype == torch.int32
    assert glue.kv_lengths((3, 0), (2, 5)) == [5, 5]


def test_graph_update_payload_with_query_lengths():
    payload = glue.graph_update_payload([5, 9], 2, padded_batch_size=3, query_lens=[2, 2])
    assert payload == [{"actual_seq_lengths_kv": [5, 9, 1], "actual_seq_lengths": [2, 2, 1]}] * 2
    assert payload[0]["actual_seq_lengths"] is not payload[1]["actual_seq_lengths"]
    with pytest.raises(ValueError, match="query lengths"):
        glue.graph_update_payload([5, 9], 1, query_lens=[2])
