"""TorchAttentionBackend against an independent oracle: dense softmax over explicit key lists.

The oracle keeps every request's K/V in logical order as plain Python lists (never reading
the paged storage) and, per query, applies the visibility rule spelled out in the contract:
the cached prefix, plus its own causal run, or its root-to-node tree path, or its draft
branch's ancestors. It computes in float64.
"""

from __future__ import annotations

import random

import pytest
import torch
from attention_harness import ATOL, Harness, oracle_attention  # beside the tests (conftest)
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_reference import TorchAttentionBackend, TorchAttentionMetadata


@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_extend_then_decode_then_chunked_extend(page_size: int) -> None:
    """Ragged prefill, decode steps, then a ragged extend over existing prefixes."""
    harness = Harness(page_size=page_size)
    harness.add_requests(3)
    harness.causal_step(ForwardMode.EXTEND, [13, 1, 40])
    for _ in range(3):
        harness.causal_step(ForwardMode.DECODE, [1, 1, 1])
    harness.causal_step(ForwardMode.EXTEND, [3, 7, 1])


@pytest.mark.parametrize(("num_heads", "num_kv_heads"), [(4, 4), (6, 2), (8, 1)])
def test_gqa_head_groups(num_heads: int, num_kv_heads: int) -> None:
    """Query head h reads KV head h // (H / H_kv), as in HF's repeat_kv."""
    harness = Harness(page_size=4, num_heads=num_heads, num_kv_heads=num_kv_heads)
    harness.add_requests(2)
    harness.causal_step(ForwardMode.EXTEND, [5, 9])
    harness.causal_step(ForwardMode.DECODE, [1, 1])


@pytest.mark.parametrize(("order", "slot_dtype"), [("HND", "int64"), ("NHD", "int32"),
                                                   ("HND", "int32")])
def test_storage_layouts(order: str, slot_dtype: str) -> None:
    """HND storage and int32 slot tables give the same attention."""
    harness = Harness(page_size=16, order=order, slot_dtype=slot_dtype)
    harness.add_requests(2)
    harness.causal_step(ForwardMode.EXTEND, [20, 3])
    harness.causal_step(ForwardMode.DECODE, [1, 1])


def test_draft_extend_is_causal_over_prefix() -> None:
    """DRAFT_EXTEND: ragged accepted tokens, each sees the prefix and earlier new tokens."""
    harness = Harness(page_size=16, num_layers=1)
    harness.add_requests(3)
    harness.causal_step(ForwardMode.EXTEND, [6, 11, 2])
    harness.causal_step(ForwardMode.DRAFT_EXTEND, [2, 4, 1])
    harness.causal_step(ForwardMode.DRAFT_EXTEND, [3, 3, 3])


# -- trees --------------------------------------------------------------------------------


def random_parents(rng: random.Random, num_nodes: int) -> list[int]:
    """Node 0 is the root (parent -1); every other node's parent is an earlier node."""
    return [-1] + [rng.randrange(i) for i in range(1, num_nodes)]


def root_path(parents: list[int], node: int) -> list[int]:
    path = []
    while node != -1:
        path.append(node)
        node = parents[node]
    return path[::-1]


def build_tree_mask(mode: str, parent_lists: list[list[int]], prefix_lens: list[int]
                    ) -> torch.Tensor:
    """The verify mask in ``mode``'s layout, written from parent lists (an explicit walk)."""
    n = len(parent_lists[0])
    blocks = []
    for parents in parent_lists:
        block = [[False] * n for _ in range(n)]
        for node in range(n):
            for ancestor in root_path(parents, node):
                block[node][ancestor] = True
        blocks.append(block)
    if mode == TreeMaskMode.TREE_BLOCK:
        return torch.tensor(blocks, dtype=torch.bool)  # [B, N, N]
    if mode == TreeMaskMode.BIT_PACKED:
        words = [[sum(1 << j for j in range(n) if row[j]) for row in block] for block in blocks]
        return torch.tensor(words, dtype=torch.int32)  # [B, N]
    flat: list[bool] = []
    for block, prefix in zip(blocks, prefix_lens, strict=True):
        for row in block:
            flat += [True] * prefix + row
    return torch.tensor(flat, dtype=torch.bool)  # [sum N * (prefix + N)]


def run_verify(harness: Harness, parent_lists: list[list[int]]) -> list[torch.Tensor]:
    """One TARGET_VERIFY forward over a tree per request; returns each layer's output after
    checking every node against attention over prefix + its own root-to-node path."""
    n = len(parent_lists[0])
    prefix_lens = harness.lengths()
    out_cache_loc: list[int] = []
    for row, prefix in zip(harness.rows, prefix_lens, strict=True):
        harness.table.reserve(row, prefix + n)
        out_cache_loc += harness.table.slots(row, prefix, prefix + n)
    harness.device_table.sync()
    tree_mask = build_tree_mask(harness.backend.tree_mask_mode, parent_lists, prefix_lens)
    batch = harness.batch(ForwardMode.TARGET_VERIFY, prefix_lens, [n] * len(prefix_lens),
                          out_cache_loc, tree_mask=tree_mask)
    outputs = []
    for layer in range(harness.num_layers):
        q, k, v = harness.random_qkv(len(out_cache_loc))
        out = harness.backend.forward(layer, q, k, v, batch)
        for i, parents in enumerate(parent_lists):
            for node in range(n):
                path = [i * n + a for a in root_path(parents, node)]
                keys = harness.keys[layer][i] + [k[t] for t in path]
                values = harness.values[layer][i] + [v[t] for t in path]
                expected = oracle_attention(q[i * n + node], keys, values, harness.scaling)
                torch.testing.assert_close(out[i * n + node].double(), expected,
                                           atol=ATOL, rtol=0)
        outputs.append(out)
    return outputs


@pytest.mark.parametrize("mode", TreeMaskMode.ALL)
@pytest.mark.parametrize("page_size", [1, 16])
def test_target_verify_random_trees(mode: str, page_size: int) -> None:
    """Each tree node's output equals attention over prefix + its own root-to-node path."""
    rng = random.Random(7)
    for num_nodes in (1, 6, 16):
        harness = Harness(page_size=page_size, tree_mask_mode=mode, seed=num_nodes)
        harness.add_requests(3)
        harness.causal_step(ForwardMode.EXTEND, [9, 1, 23])
        run_verify(harness, [random_parents(rng, num_nodes) for _ in range(3)])


def test_tree_mask_layouts_agree() -> None:
    """The same trees in the three layouts give identical outputs."""
    rng = random.Random(3)
    parent_lists = [random_parents(rng, 12) for _ in range(2)]
    results = []
    for mode in TreeMaskMode.ALL:
        harness = Harness(page_size=16, tree_mask_mode=mode, seed=11)
        harness.add_requests(2)
        harness.causal_step(ForwardMode.EXTEND, [17, 4])
        results.append(run_verify(harness, parent_lists))
    for other in results[1:]:
        for a, b in zip(results[0], other, strict=True):
            torch.testing.assert_close(a, b, atol=1e-6, rtol=0)


# -- multi-step draft ---------------------------------------------------------------------


@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_draft_decode_branches_see_their_ancestors(page_size: int) -> None:
    """DRAFT_DECODE over 3 steps, K=3: each branch sees the prefix, its ancestors, itself."""
    branches, steps = 3, 3
    harness = Harness(page_size=page_size, num_layers=1, seed=page_size)
    harness.add_requests(2)
    harness.causal_step(ForwardMode.EXTEND, [10, 3])
    prefix_lens = harness.lengths()
    rng = random.Random(page_size)
    # per request and branch: the (slot, k, v) of its ancestors and itself
    chains: list[list[list[tuple[int, torch.Tensor, torch.Tensor]]]] = [
        [[] for _ in range(branches)] for _ in harness.rows
    ]
    for step in range(steps):
        out_cache_loc: list[int] = []
        parent_choice = [[rng.randrange(branches) for _ in range(branches)] for _ in harness.rows]
        for row in harness.rows:  # K fresh slots per request for this step's draft tokens
            length = harness.table.length(row)
            harness.table.reserve(row, length + branches)
            out_cache_loc += harness.table.slots(row, length, length + branches)
        harness.device_table.sync()
        draft_kv_slots = []
        for i in range(len(harness.rows)):
            for b in range(branches):
                ancestors = chains[i][parent_choice[i][b]] if step else []
                draft_kv_slots.append([s for s, _, _ in ancestors]
                                      + [out_cache_loc[i * branches + b]])
        batch = harness.batch(
            ForwardMode.DRAFT_DECODE, prefix_lens, [branches] * len(harness.rows),
            out_cache_loc, draft_kv_slots=torch.tensor(draft_kv_slots), num_branches=branches)
        q, k, v = harness.random_qkv(len(out_cache_loc))
        out = harness.backend.forward(0, q, k, v, batch)
        new_chains = []
        for i in range(len(harness.rows)):
            request_chains = []
            for b in range(branches):
                r = i * branches + b
                ancestors = chains[i][parent_choice[i][b]] if step else []
                chain = ancestors + [(out_cache_loc[r], k[r], v[r])]
                keys = harness.keys[0][i] + [ck for _, ck, _ in chain]
                values = harness.values[0][i] + [cv for _, _, cv in chain]
                expected = oracle_attention(q[r], keys, values, harness.scaling)
                torch.testing.assert_close(out[r].double(), expected, atol=ATOL, rtol=0)
                request_chains.append(chain)
            new_chains.append(request_chains)
        chains = new_chains


# -- contract errors and dtype ------------------------------------------------------------


def test_low_precision_inputs_computed_in_float32() -> None:
    """bfloat16 q/k/v: output in bfloat16, within bfloat16 rounding of the exact result."""
    harness = Harness(page_size=16, num_layers=1)
    harness.store = harness.store  # float32 storage; the inputs are rounded to bfloat16
    harness.add_requests(1)
    harness.table.reserve(harness.rows[0], 12)
    harness.device_table.sync()
    slots = harness.table.slots(harness.rows[0], 0, 12)
    batch = harness.batch(ForwardMode.EXTEND, [0], [12], slots)
    q, k, v = (t.bfloat16() for t in harness.random_qkv(12))
    out = harness.backend.forward(0, q, k, v, batch)
    assert out.dtype == torch.bfloat16
    expected = oracle_attention(q[11], list(k), list(v), harness.scaling)
    torch.testing.assert_close(out[11].double(), expected, atol=2e-2, rtol=0)


def test_verify_without_mask_and_foreign_metadata_are_rejected() -> None:
    harness = Harness(page_size=1, num_layers=1)
    harness.add_requests(1)
    harness.table.reserve(harness.rows[0], 4)
    harness.device_table.sync()
    slots = harness.table.slots(harness.rows[0], 0, 4)
    with pytest.raises(ValueError, match="tree_mask"):
        harness.batch(ForwardMode.TARGET_VERIFY, [0], [4], slots)
    batch = harness.batch(ForwardMode.EXTEND, [0], [4], slots)
    batch.attn_metadata = None
    q, k, v = harness.random_qkv(4)
    with pytest.raises(TypeError, match="plan"):
        harness.backend.forward(0, q, k, v, batch)
    with pytest.raises(ValueError, match="tree-mask mode"):
        TorchAttentionBackend(harness.backend.config, tree_mask_mode="diagonal")


def test_plan_builds_metadata_once_for_all_layers() -> None:
    """The metadata is a TorchAttentionMetadata whose key matrix covers prefix + new."""
    harness = Harness(page_size=16)
    harness.add_requests(2)
    harness.causal_step(ForwardMode.EXTEND, [5, 2])
    harness.table.reserve(harness.rows[0], 6)
    harness.table.reserve(harness.rows[1], 3)
    harness.device_table.sync()
    slots = harness.table.slots(harness.rows[0], 5, 6) + harness.table.slots(harness.rows[1], 2, 3)
    batch = harness.batch(ForwardMode.DECODE, [5, 2], [1, 1], slots)
    metadata = batch.attn_metadata
    assert isinstance(metadata, TorchAttentionMetadata)
    assert metadata.key_slots.shape == (2, 5 + 1)
    assert metadata.visible.shape == (2, 1, 6)
    assert metadata.query_gather is None  # uniform: no padding needed


def test_full_mask_prefix_columns_are_honoured() -> None:
    """A FULL mask may hide prefix positions; the backend must respect them."""
    harness = Harness(page_size=16, num_layers=1, tree_mask_mode=TreeMaskMode.FULL, seed=5)
    harness.add_requests(2)
    harness.causal_step(ForwardMode.EXTEND, [7, 12])
    prefix_lens = harness.lengths()
    rng = random.Random(5)
    parent_lists = [random_parents(rng, 5) for _ in range(2)]
    n = 5
    out_cache_loc: list[int] = []
    for row, prefix in zip(harness.rows, prefix_lens, strict=True):
        harness.table.reserve(row, prefix + n)
        out_cache_loc += harness.table.slots(row, prefix, prefix + n)
    harness.device_table.sync()
    hidden = [[[rng.random() < 0.4 for _ in range(p)] for _ in range(n)] for p in prefix_lens]
    flat: list[bool] = []
    for i, (parents, prefix) in enumerate(zip(parent_lists, prefix_lens, strict=True)):
        for node in range(n):
            path = set(root_path(parents, node))
            flat += [not hidden[i][node][c] for c in range(prefix)]
            flat += [j in path for j in range(n)]
    batch = harness.batch(ForwardMode.TARGET_VERIFY, prefix_lens, [n, n], out_cache_loc,
                          tree_mask=torch.tensor(flat))
    q, k, v = harness.random_qkv(2 * n)
    out = harness.backend.forward(0, q, k, v, batch)
    for i, parents in enumerate(parent_lists):
        for node in range(n):
            shown = [c for c in range(prefix_lens[i]) if not hidden[i][node][c]]
            path = [i * n + a for a in root_path(parents, node)]
            keys = [harness.keys[0][i][c] for c in shown] + [k[t] for t in path]
            values = [harness.values[0][i][c] for c in shown] + [v[t] for t in path]
            expected = oracle_attention(q[i * n + node], keys, values, harness.scaling)
            torch.testing.assert_close(out[i * n + node].double(), expected, atol=ATOL, rtol=0)
