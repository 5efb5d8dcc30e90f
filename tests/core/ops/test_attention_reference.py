"""TorchAttentionBackend against an independent oracle: dense softmax over explicit key lists.

The oracle keeps every request's K/V in logical order as plain Python lists (never reading
the paged storage) and, per query, applies the visibility rule spelled out in the contract:
the cached prefix, plus its own causal run, or its root-to-node tree path, or its draft
branch's ancestors. It computes in float64.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from eagle_hal.backend import TreeMaskMode
from eagle_hal.engine.kv_cache import (
    DeviceTokenTable,
    KVStorage,
    PageAllocator,
    RequestTokenTable,
)
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.attention_reference import TorchAttentionBackend, TorchAttentionMetadata

ATOL = 2e-5  # float32 compute against a float64 oracle, scores of O(1)
HEAD_DIM = 8


def oracle_attention(q: torch.Tensor, keys: list[torch.Tensor], values: list[torch.Tensor],
                     scaling: float) -> torch.Tensor:
    """``q`` [H, D] over the listed keys/values (each [H_kv, D]); query head h reads KV head
    h // (H / H_kv). Returns [H, D] float64."""
    num_heads = q.shape[0]
    k = torch.stack(keys).double()  # [n, H_kv, D]
    v = torch.stack(values).double()
    kv_head = torch.arange(num_heads) // (num_heads // k.shape[1])
    k, v = k[:, kv_head], v[:, kv_head]  # [n, H, D]
    scores = torch.einsum("hd,nhd->hn", q.double(), k) * scaling
    return torch.einsum("hn,nhd->hd", torch.softmax(scores, dim=-1), v)


class Harness:
    """A paged KV cache with shuffled pages, one backend, and the oracle's plain K/V lists."""

    def __init__(self, *, page_size: int, num_heads: int = 4, num_kv_heads: int = 2,
                 num_layers: int = 2, order: str = "NHD", slot_dtype: str = "int64",
                 tree_mask_mode: str = TreeMaskMode.TREE_BLOCK, num_pages: int | None = None,
                 seed: int = 0) -> None:
        self.rng = random.Random(seed)
        torch.manual_seed(seed)
        self.layout = KVLayout(order=order, page_size=page_size, slot_dtype=slot_dtype)
        num_pages = num_pages or max(8, 512 // page_size + 1)
        self.allocator = PageAllocator(num_pages, page_size)
        # Hand pages out in a random order so a request's slots are far from contiguous.
        pages = self.allocator.allocate(self.allocator.num_free_pages)
        self.rng.shuffle(pages)
        self.allocator.free(pages)
        self.table = RequestTokenTable(self.allocator, max_requests=8, max_context=512)
        self.store = KVStorage.for_allocator(
            self.allocator, num_layers=num_layers, num_kv_heads=num_kv_heads,
            head_dim=HEAD_DIM, layout=self.layout, dtype=torch.float32, device="cpu")
        self.device_table = DeviceTokenTable(self.table, self.layout, "cpu")
        self.num_heads, self.num_kv_heads, self.num_layers = num_heads, num_kv_heads, num_layers
        self.scaling = 1.0 / math.sqrt(HEAD_DIM)
        config = AttentionConfig(num_heads, num_kv_heads, HEAD_DIM, num_layers, self.scaling,
                                 self.store, self.device_table.tensor)
        self.backend = TorchAttentionBackend(config, tree_mask_mode=tree_mask_mode)
        self.rows: list[int] = []
        # oracle: per layer, per request index, the K and V of logical positions in order
        self.keys: list[list[list[torch.Tensor]]] = [[] for _ in range(num_layers)]
        self.values: list[list[list[torch.Tensor]]] = [[] for _ in range(num_layers)]

    def add_requests(self, count: int) -> None:
        for _ in range(count):
            self.rows.append(self.table.add_request())
            for layer in range(self.num_layers):
                self.keys[layer].append([])
                self.values[layer].append([])

    def lengths(self) -> list[int]:
        return [self.table.length(r) for r in self.rows]

    def random_qkv(self, num_tokens: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return (torch.randn(num_tokens, self.num_heads, HEAD_DIM),
                torch.randn(num_tokens, self.num_kv_heads, HEAD_DIM),
                torch.randn(num_tokens, self.num_kv_heads, HEAD_DIM))

    def batch(self, mode: ForwardMode, prefix_lens: list[int], extend_lens: list[int],
              out_cache_loc: list[int], **extra: object) -> ForwardBatch:
        num_tokens = len(out_cache_loc)
        batch = ForwardBatch(
            mode=mode,
            input_ids=torch.zeros(num_tokens, dtype=torch.int64),
            positions=torch.zeros(num_tokens, dtype=torch.int64),
            req_pool_indices=torch.tensor(self.rows, dtype=torch.int64),
            prefix_lens=torch.tensor(prefix_lens, dtype=torch.int64),
            extend_lens=torch.tensor(extend_lens, dtype=torch.int64),
            out_cache_loc=torch.tensor(out_cache_loc, dtype=torch.int64),
            prefix_lens_cpu=tuple(prefix_lens),
            extend_lens_cpu=tuple(extend_lens),
            **extra,  # type: ignore[arg-type]
        )
        batch.attn_metadata = self.backend.plan(batch)
        return batch

    def causal_step(self, mode: ForwardMode, extend_lens: list[int]) -> None:
        """Append ``extend_lens[i]`` tokens to request i, run every layer, check each output
        against the oracle's causal rule, and keep the new K/V in the oracle."""
        prefix_lens = self.lengths()
        out_cache_loc: list[int] = []
        for row, prefix, extend in zip(self.rows, prefix_lens, extend_lens, strict=True):
            self.table.reserve(row, prefix + extend)
            out_cache_loc += self.table.slots(row, prefix, prefix + extend)
        self.device_table.sync()
        batch = self.batch(mode, prefix_lens, extend_lens, out_cache_loc)
        for layer in range(self.num_layers):
            q, k, v = self.random_qkv(len(out_cache_loc))
            out = self.backend.forward(layer, q, k, v, batch)
            assert out.shape == q.shape and out.dtype == q.dtype
            token = 0
            for i, extend in enumerate(extend_lens):
                keys, values = self.keys[layer][i], self.values[layer][i]
                for j in range(extend):
                    keys.append(k[token + j])
                    values.append(v[token + j])
                for j in range(extend):
                    visible = prefix_lens[i] + j + 1  # the prefix, then new tokens 0..j
                    expected = oracle_attention(q[token + j], keys[:visible], values[:visible],
                                                self.scaling)
                    torch.testing.assert_close(out[token + j].double(), expected,
                                               atol=ATOL, rtol=0)
                token += extend


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
