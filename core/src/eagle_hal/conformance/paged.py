"""A paged KV cache with known contents and a dense attention oracle, for the attention,
KV and graph areas.

``PagedScene`` owns a ``KVStorage`` in the backend's layout over pages handed out in a
shuffled order (page 0, the padding page, is never used), a ``req_to_token`` table whose
rows are scattered, and a host float64 copy of every K/V it wrote. ``forward_batch``
builds a ``ForwardBatch`` for any mode; ``dense_attention`` computes what each query must
see, from the mode's definition, in float64 with an explicit loop over tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.requirements import requires
from eagle_hal.conformance.session import current_session
from eagle_hal.engine.kv_cache import KVStorage, slot_dtype
from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.tree_mask import TreeMaskMode

__all__ = [
    "STANDARD_PAGE_SIZES",
    "Geometry",
    "PagedScene",
    "encode_tree_mask",
    "page_size_params",
    "page_sizes_to_check",
    "preferred_page_size",
    "random_parents",
]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
STANDARD_PAGE_SIZES: tuple[int, ...] = (1, 16, 64)


def page_sizes_to_check(backend: Backend | None) -> tuple[int, ...]:
    """``STANDARD_PAGE_SIZES`` plus every size ``backend`` names: ``Capabilities.page_sizes``,
    ``page_size_multiple`` and its ``kv_layout()`` page size; sorted. Sizes the backend does
    not support are still listed (the checks skip them with the reason)."""
    sizes = set(STANDARD_PAGE_SIZES)
    if backend is not None:
        caps = backend.capabilities
        sizes.update(caps.page_sizes)
        sizes.add(caps.page_size_multiple)
        sizes.add(backend.kv_layout().page_size)
    return tuple(sorted(sizes))


def page_size_params(config: Any) -> list[Any]:
    """One ``pytest.param`` (id ``page<n>``, marked ``requires("page_size:<n>")``) per page
    size ``page_sizes_to_check`` lists for the backend under test; the standard sizes alone
    when no backend could be selected (the checks then fail on the selection)."""
    session = current_session(config)
    backend = None
    if session is not None and session.selection_error is None:
        backend = session.backend
    return [pytest.param(p, marks=requires(f"page_size:{p}"), id=f"page{p}")
            for p in page_sizes_to_check(backend)]


def preferred_page_size(backend: Backend) -> int:
    """The page size of ``backend.kv_layout()`` if supported, else the smallest it supports."""
    caps = backend.capabilities
    own = backend.kv_layout().page_size
    if caps.supports_page_size(own):
        return own
    supported = [p for p in page_sizes_to_check(backend) if caps.supports_page_size(p)]
    if not supported:
        raise ValueError(
            f"backend {backend.name!r} supports none of the page sizes "
            f"{page_sizes_to_check(backend)}"
        )
    return supported[0]


@dataclasses.dataclass(frozen=True, slots=True)
class Geometry:
    num_heads: int = 4
    num_kv_heads: int = 2
    head_dim: int = 64
    num_layers: int = 2
    max_requests: int = 8
    max_context: int = 256

    @property
    def scaling(self) -> float:
        return self.head_dim**-0.5


def random_parents(gen: torch.Generator, batch: int, nodes: int) -> torch.Tensor:
    """``[B, N]`` parent node of each node (node 0, the root, has parent -1)."""
    parents = torch.full((batch, nodes), -1, dtype=torch.int64)
    for i in range(1, nodes):
        parents[:, i] = torch.randint(0, i, (batch,), generator=gen)
    return parents


def _ancestor_block(parents: torch.Tensor) -> torch.Tensor:
    """``[B, N, N]`` bool: node i sees node j iff j is i or an ancestor of i."""
    batch, nodes = parents.shape
    block = torch.zeros(batch, nodes, nodes, dtype=torch.bool)
    for b in range(batch):
        for i in range(nodes):
            j = i
            while j >= 0:
                block[b, i, j] = True
                j = int(parents[b, j])
    return block


def encode_tree_mask(parents: torch.Tensor, prefix_lens: list[int], mode: str) -> torch.Tensor:
    """The verify tree mask of ``parents`` in layout ``mode`` (see ``TreeMaskMode``)."""
    block = _ancestor_block(parents)
    if mode == TreeMaskMode.TREE_BLOCK:
        return block
    if mode == TreeMaskMode.BIT_PACKED:
        weights = 2 ** torch.arange(block.shape[-1], dtype=torch.int64)
        return (block.to(torch.int64) * weights).sum(-1)  # [B, N]
    rows = [torch.cat([torch.ones(block.shape[1], p, dtype=torch.bool), block[b]],
                      dim=1).reshape(-1)
            for b, p in enumerate(prefix_lens)]
    return torch.cat(rows)


class PagedScene:
    """KV storage on the backend's device with known contents (see the module docstring)."""

    def __init__(self, backend: Backend, page_size: int, dtype: str, seed: int,
                 geometry: Geometry = Geometry()) -> None:
        self.backend = backend
        self.device = backend.torch_device
        self.geometry = geometry
        self.dtype = DTYPES[dtype]
        self.page_size = page_size
        num_pages = max(64, 512 // page_size)
        self.gen = torch.Generator().manual_seed(seed)
        self.layout = backend.kv_layout().with_page_size(page_size)
        self.store = KVStorage(
            num_layers=geometry.num_layers, num_slots=num_pages * page_size,
            num_kv_heads=geometry.num_kv_heads, head_dim=geometry.head_dim,
            layout=self.layout, dtype=self.dtype, device=self.device,
        )
        self.free_pages = (torch.randperm(num_pages - 1, generator=self.gen) + 1).tolist()
        self.table = torch.zeros(geometry.max_requests, geometry.max_context, dtype=torch.int64)
        self.rows = torch.randperm(geometry.max_requests, generator=self.gen).tolist()
        self.lengths: dict[int, int] = {}  # row -> positions with a slot
        self.kv: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}  # (layer, slot)
        self.req_to_token = self.table.to(self.device, slot_dtype(self.layout))

    # -- building ------------------------------------------------------------------------

    def attention(self, layer_windows: tuple[int | None, ...] = (),
                  logit_softcap: float | None = None) -> AttentionBackend:
        g = self.geometry
        config = AttentionConfig(g.num_heads, g.num_kv_heads, g.head_dim, g.num_layers, g.scaling,
                                 self.store, self.req_to_token, layer_windows, logit_softcap)
        return self.backend.create_attention_backend(config)

    def extend_rows(self, row: int, count: int) -> list[int]:
        """Give request ``row`` ``count`` more positions (new pages as needed); their slots."""
        start = self.lengths.get(row, 0)
        slots = []
        for position in range(start, start + count):
            if position % self.page_size == 0:
                self.table[row, position] = self.free_pages.pop() * self.page_size
            else:
                self.table[row, position] = self.table[row, position - 1] + 1
            slots.append(int(self.table[row, position]))
        self.lengths[row] = start + count
        self.req_to_token.copy_(self.table.to(self.req_to_token.dtype))
        return slots

    def scratch_slots(self, count: int) -> list[int]:
        """``count`` slots of fresh pages, outside any request."""
        slots: list[int] = []
        while len(slots) < count:
            page = self.free_pages.pop()
            slots += range(page * self.page_size, (page + 1) * self.page_size)
        return slots[:count]

    def random_kv(self, tokens: int) -> tuple[torch.Tensor, torch.Tensor]:
        g = self.geometry
        shape = (tokens, g.num_kv_heads, g.head_dim)
        return torch.randn(shape, generator=self.gen), torch.randn(shape, generator=self.gen)

    def write(self, layer: int, slots: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        """Write K/V through the storage and remember what it should now hold."""
        k, v = k.to(self.dtype), v.to(self.dtype)
        index = torch.tensor(slots, dtype=torch.int64, device=self.device)
        self.store.write_kv(layer, index, k.to(self.device), v.to(self.device))
        self.remember(layer, slots, k, v)

    def remember(self, layer: int, slots: list[int], k: torch.Tensor, v: torch.Tensor) -> None:
        for i, slot in enumerate(slots):
            self.kv[(layer, slot)] = (k[i].to(self.dtype).double(), v[i].to(self.dtype).double())

    def fill_prefixes(self, rows: list[int], prefix_lens: list[int]) -> None:
        for row, n in zip(rows, prefix_lens, strict=True):
            slots = self.extend_rows(row, n)
            for layer in range(self.geometry.num_layers):
                if slots:
                    self.write(layer, slots, *self.random_kv(n))

    def forward_batch(self, mode: ForwardMode, rows: list[int], prefix_lens: list[int],
                      extend_lens: list[int], out_cache_loc: list[int], *, tree_mask: Any = None,
                      draft_kv_slots: torch.Tensor | None = None,
                      num_branches: int = 1) -> ForwardBatch:
        device, dtype = self.device, slot_dtype(self.layout)
        positions = torch.cat([torch.arange(p, p + n)
                               for p, n in zip(prefix_lens, extend_lens, strict=True)])
        tokens = len(out_cache_loc)
        return ForwardBatch(
            mode=mode,
            input_ids=torch.zeros(tokens, dtype=torch.int64, device=device),
            positions=positions[:tokens].to(device) if mode is not ForwardMode.DRAFT_DECODE
            else torch.zeros(tokens, dtype=torch.int64, device=device),
            table_rows=torch.tensor(rows, dtype=torch.int64, device=device),
            prefix_lens=torch.tensor(prefix_lens, dtype=torch.int64, device=device),
            extend_lens=torch.tensor(extend_lens, dtype=torch.int64, device=device),
            out_cache_loc=torch.tensor(out_cache_loc, dtype=dtype, device=device),
            prefix_lens_cpu=tuple(prefix_lens), extend_lens_cpu=tuple(extend_lens),
            tree_mask=None if tree_mask is None else tree_mask.to(device),
            draft_kv_slots=None if draft_kv_slots is None else draft_kv_slots.to(device, dtype),
            num_branches=num_branches,
        )

    # -- the oracle ------------------------------------------------------------------------

    def dense_attention(
        self, layer: int, q: torch.Tensor, visible_slots: list[list[int]],
        softcap: float | None = None,
    ) -> torch.Tensor:
        """Token t attends over ``visible_slots[t]`` with remembered K/V (each score ``s``
        capped to ``softcap * tanh(s / softcap)`` when given); float64 ``[T, H, D]``."""
        g = self.geometry
        group = g.num_heads // g.num_kv_heads
        q = q.to(self.dtype).double().cpu()
        out = torch.zeros(q.shape, dtype=torch.float64)
        for t, slots in enumerate(visible_slots):
            keys = torch.stack([self.kv[(layer, s)][0] for s in slots])  # [S, H_kv, D]
            values = torch.stack([self.kv[(layer, s)][1] for s in slots])
            for h in range(g.num_heads):
                scores = keys[:, h // group] @ q[t, h] * g.scaling  # [S]
                if softcap is not None:
                    scores = torch.tanh(scores / softcap) * softcap
                out[t, h] = torch.softmax(scores, dim=0) @ values[:, h // group]
        return out
