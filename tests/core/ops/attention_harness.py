"""The attention tests' harness: a paged KV cache with shuffled pages, one
``TorchAttentionBackend`` and an independent oracle, dense softmax over explicit key lists
kept in logical order as plain Python lists (never read from the paged storage), in float64.
"""

from __future__ import annotations

import math
import random

import torch
from eagle_hal.engine.kv_cache import (
    DeviceTokenTable,
    KVStorage,
    PageAllocator,
    RequestTokenTable,
)
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_reference import TorchAttentionBackend

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
            table_rows=torch.tensor(self.rows, dtype=torch.int64),
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
