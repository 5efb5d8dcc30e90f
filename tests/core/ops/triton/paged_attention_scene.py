"""A paged KV scene and its float64 oracle for the split attention tests
(``test_attention_split.py``).

A ``Scene`` is a one-layer KV store of random K/V over the engine's own page allocator and
token table, with the free pages shuffled so a request's pages are scattered. Its oracle
(``Scene.expected``) recomputes softmax attention in float64 over exactly the slots a
token may see, read from the store as it is. Importing this module skips the importing
test module where Triton is missing.
"""

from __future__ import annotations

import math

import pytest
import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, PageAllocator, RequestTokenTable
from eagle_hal.hal.kv_layout import KVLayout

kernels = pytest.importorskip("eagle_hal.ops.triton.attention_split")

MAX_REQUESTS, MAX_CONTEXT, CACHE_TOKENS = 5, 256, 1280
BLOCK = 16  # keys per block in these tests
TOLERANCE = {torch.float32: 2e-5, torch.float16: 5e-3, torch.bfloat16: 2e-2}


def device() -> torch.device:
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


def int32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device=device())


class Scene:
    """A one-layer KV store filled with random K/V, over scattered pages of a token table."""

    def __init__(self, *, page_size=16, order="NHD", heads=6, kv_heads=2, head_dim=16,
                 dtype=torch.float32, seed=0) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.heads, self.kv_heads, self.head_dim, self.dtype = heads, kv_heads, head_dim, dtype
        self.dev = device()
        num_pages = -(-CACHE_TOKENS // page_size) + 1
        allocator = PageAllocator(num_pages, page_size)
        pages = allocator.allocate(num_pages - 1)
        allocator.free([pages[i] for i in torch.randperm(len(pages), generator=self.gen)])
        self.table = RequestTokenTable(allocator, MAX_REQUESTS, MAX_CONTEXT)
        self.layout = KVLayout(order=order, page_size=page_size)
        self.device_table = DeviceTokenTable(self.table, self.layout, self.dev)
        self.store = KVStorage.for_allocator(allocator, num_layers=1, num_kv_heads=kv_heads,
                                             head_dim=head_dim, layout=self.layout,
                                             dtype=dtype, device=self.dev)
        for buffer in (self.store.k_buffer(0), self.store.v_buffer(0)):
            buffer.copy_(torch.randn(buffer.shape, generator=self.gen).to(dtype))

    def randn(self, *shape) -> torch.Tensor:
        return torch.randn(*shape, generator=self.gen).to(self.dev, self.dtype)

    def add_requests(self, lengths: list[int]) -> list[int]:
        """Rows of new requests with the given table lengths, grown in turns."""
        rows = [self.table.add_request() for _ in lengths]
        for step in range(1, max(lengths) + 1):
            for row, length in zip(rows, lengths, strict=True):
                if step <= length:
                    self.table.reserve(row, step)
        self.device_table.sync()
        return rows

    def slots(self, row: int, start: int, end: int) -> list[int]:
        return self.table.slots(row, start, end)

    def kv_rows(self, slots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """K and V ``[len(slots), H_kv, D]`` as the store holds them now."""
        index = torch.tensor(slots, dtype=torch.int64, device=self.dev)
        k, v = self.store.k_buffer(0), self.store.v_buffer(0)
        if self.layout.order == "HND":
            return k[:, index].transpose(0, 1), v[:, index].transpose(0, 1)
        return k[index], v[index]

    def run(self, q, k, v, out_cache_loc, rows, prefix_lens, token_request, own_base,
            own_len, num_splits, ancestor_slots=None, tree_mask=None, tree_width=0):
        return kernels.split_paged_attention(
            q, k, v, self.store.k_buffer(0), self.store.v_buffer(0), self.layout.order,
            torch.tensor(out_cache_loc, device=self.dev), self.device_table.tensor,
            torch.tensor(rows, device=self.dev), torch.tensor(prefix_lens, device=self.dev),
            int32(token_request), int32(own_base), int32(own_len),
            None if ancestor_slots is None else torch.tensor(ancestor_slots, device=self.dev),
            tree_mask, tree_width, 1 / math.sqrt(self.head_dim), num_splits,
            block_keys=BLOCK,
        )

    def expected(self, q: torch.Tensor, visible: list[list[int]]) -> torch.Tensor:
        """Softmax attention in float64 over each token's visible slots (store as it is)."""
        group = self.heads // self.kv_heads
        outs = []
        for t, slots in enumerate(visible):
            keys, values = (x.double().repeat_interleave(group, dim=1) for x in self.kv_rows(slots))
            scores = torch.einsum("hd,khd->hk", q[t].double(), keys) / math.sqrt(self.head_dim)
            outs.append(torch.einsum("hk,khd->hd", scores.softmax(-1), values))
        return torch.stack(outs)  # [T, H, D]

    def check(self, out: torch.Tensor, q: torch.Tensor, visible: list[list[int]]) -> None:
        tol = TOLERANCE[self.dtype]
        torch.testing.assert_close(out.double(), self.expected(q, visible), atol=tol, rtol=tol)


def causal_case(scene: Scene, prefix_lens: list[int], extend_lens: list[int]):
    """Requests with cached prefixes and new tokens: the kernel's inputs and the oracle's
    visible slots (each new token sees its prefix and the request's new tokens up to itself)."""
    rows = scene.add_requests([p + n for p, n in zip(prefix_lens, extend_lens, strict=True)])
    out_cache_loc, token_request, own_base, own_len, visible = [], [], [], [], []
    start = 0
    for request, (row, p, n) in enumerate(zip(rows, prefix_lens, extend_lens, strict=True)):
        out_cache_loc += scene.slots(row, p, p + n)
        for i in range(n):
            token_request.append(request)
            own_base.append(start)
            own_len.append(i + 1)
            visible.append(scene.slots(row, 0, p + i + 1))
        start += n
    plan = dict(out_cache_loc=out_cache_loc, rows=rows, prefix_lens=prefix_lens,
                token_request=token_request, own_base=own_base, own_len=own_len)
    return plan, visible
