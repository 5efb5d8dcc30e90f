"""The paged KV cache's tensors: per-layer K/V storage and the device request-to-token table.

The accounting (which pages a request owns) lives in ``engine.page_allocator`` and is pure
integers; this module holds only what must be tensors:

* ``KVStorage``: one K and one V tensor per layer, in the ``KVLayout`` the attention
  backend declares (``NHD``: ``[num_slots, H_kv, D]``, ``HND``: ``[H_kv, num_slots, D]``).
  All of them are views of one ``[2, L, ...]`` tensor, so a move touches every layer in
  one gather and one scatter.
  It implements the ``KVStore`` protocol of ``eagle_hal.hal.attention``. The target model
  (L layers) and the draft model (1 layer) each get one, over the same allocator and table.
* ``DeviceTokenTable``: the ``req_to_token`` tensor ``[max_requests, max_context]`` attention
  backends read, refreshed from a ``RequestTokenTable`` by ``sync()``.

Storage is zero-initialised, so a slot never written (the padding page included) holds
finite values.
"""

from __future__ import annotations

import torch

from eagle_hal.engine.page_allocator import (
    PADDING_PAGE,
    ContextTooLong,
    KVCacheExhausted,
    PageAllocator,
    RequestRowsExhausted,
    RequestTokenTable,
)
from eagle_hal.hal.kv_layout import KVLayout

__all__ = [
    "PADDING_PAGE",
    "ContextTooLong",
    "DeviceTokenTable",
    "KVCacheExhausted",
    "KVStorage",
    "PageAllocator",
    "RequestRowsExhausted",
    "RequestTokenTable",
    "slot_dtype",
]


def slot_dtype(layout: KVLayout) -> torch.dtype:
    """The torch integer dtype of slot indices for ``layout``."""
    return torch.int32 if layout.slot_dtype == "int32" else torch.int64


class KVStorage:
    """Per-layer K/V tensors for ``num_slots`` slots (``allocator.num_slots``)."""

    def __init__(
        self,
        *,
        num_layers: int,
        num_slots: int,
        num_kv_heads: int,
        head_dim: int,
        layout: KVLayout,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> None:
        if num_layers < 1 or num_slots < 1 or num_kv_heads < 1 or head_dim < 1:
            raise ValueError(
                "num_layers, num_slots, num_kv_heads and head_dim must all be >= 1, got "
                f"{num_layers}, {num_slots}, {num_kv_heads}, {head_dim}"
            )
        if num_slots % layout.page_size:
            raise ValueError(
                f"num_slots ({num_slots}) must be a multiple of the page size ({layout.page_size})"
            )
        self.layout = layout
        self.num_layers = num_layers
        self.num_slots = num_slots
        self.num_kv_heads = num_kv_heads
        self.head_dim = head_dim
        self.dtype = dtype
        self.device = torch.device(device)
        if layout.order == "NHD":
            shape = (num_slots, num_kv_heads, head_dim)
        else:
            shape = (num_kv_heads, num_slots, head_dim)
        # [K/V, layer, ...]: per-layer buffers are contiguous views of one tensor
        self._kv = torch.zeros((2, num_layers, *shape), dtype=dtype, device=self.device)
        self._k = list(self._kv[0].unbind(0))
        self._v = list(self._kv[1].unbind(0))
        self._slot_dim = 2 if layout.order == "NHD" else 3  # the slot axis of ``_kv``

    @classmethod
    def for_allocator(
        cls,
        allocator: PageAllocator,
        *,
        num_layers: int,
        num_kv_heads: int,
        head_dim: int,
        layout: KVLayout,
        dtype: torch.dtype,
        device: torch.device | str,
    ) -> KVStorage:
        """Storage sized for every slot of ``allocator`` (whose page size must match)."""
        if allocator.page_size != layout.page_size:
            raise ValueError(
                f"allocator page size {allocator.page_size} != layout page size {layout.page_size}"
            )
        return cls(
            num_layers=num_layers,
            num_slots=allocator.num_slots,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            layout=layout,
            dtype=dtype,
            device=device,
        )

    def k_buffer(self, layer: int) -> torch.Tensor:
        return self._k[layer]

    def v_buffer(self, layer: int) -> torch.Tensor:
        return self._v[layer]

    @property
    def nbytes(self) -> int:
        return self._kv.numel() * self._kv.element_size()

    def write_kv(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[T, H_kv, D]`` at ``slots`` ``[T]`` of layer ``layer`` (cast to
        the storage dtype). Duplicate slots: which write wins is unspecified."""
        if k.shape != v.shape or k.shape[1:] != (self.num_kv_heads, self.head_dim):
            raise ValueError(
                f"k/v must be [T, {self.num_kv_heads}, {self.head_dim}], got "
                f"{tuple(k.shape)} and {tuple(v.shape)}"
            )
        index = slots.to(torch.int64)
        if self.layout.order == "NHD":
            self._k[layer][index] = k.to(self.dtype)
            self._v[layer][index] = v.to(self.dtype)
        else:
            self._k[layer][:, index] = k.to(self.dtype).transpose(0, 1)
            self._v[layer][:, index] = v.to(self.dtype).transpose(0, 1)

    def move_kv(self, src_slots: torch.Tensor, dst_slots: torch.Tensor) -> None:
        """Copy every layer's K/V from ``src_slots`` to ``dst_slots`` (both ``[M]``). All
        sources are read before any destination is written, so overlapping ranges are
        safe; ``dst_slots`` must not repeat."""
        if src_slots.shape != dst_slots.shape:
            raise ValueError(
                f"move_kv: src {tuple(src_slots.shape)} and dst {tuple(dst_slots.shape)} differ"
            )
        if src_slots.numel() == 0:
            return
        src, dst = src_slots.to(torch.int64), dst_slots.to(torch.int64)
        # one gather and one scatter over every layer's K and V (the gather copies first)
        if self._slot_dim == 2:
            self._kv[:, :, dst] = self._kv[:, :, src]
        else:
            self._kv[:, :, :, dst] = self._kv[:, :, :, src]


class DeviceTokenTable:
    """The ``req_to_token`` tensor ``[max_requests, max_context]`` of slots, on ``device``.

    ``sync()`` writes into it the positions the integer ``RequestTokenTable`` reports as
    changed whose slot differs from what the device already holds (a host mirror tracks
    that), all rows in one host-to-device copy and one scatter. Positions past a row's
    length hold stale slots; attention reads only ``[0, prefix_len)``.
    """

    def __init__(
        self, table: RequestTokenTable, layout: KVLayout, device: torch.device | str
    ) -> None:
        if table.page_size != layout.page_size:
            raise ValueError(
                f"table page size {table.page_size} != layout page size {layout.page_size}"
            )
        self.table = table
        self.tensor = torch.zeros(
            table.max_requests, table.max_context, dtype=slot_dtype(layout), device=device
        )
        self._mirror: dict[int, list[int]] = {}  # row -> the slots the device holds (prefix)

    def sync(self) -> None:
        """Write the slots of every position defined since the last ``sync`` that changed."""
        rows, columns, values = self.pending_writes()
        if not values:
            return
        host = torch.tensor([rows, columns, values], dtype=torch.int64)  # [3, M]
        if self.tensor.device.type != "cpu":
            host = host.pin_memory()
        index = host.to(self.tensor.device, non_blocking=True)
        self.write(index[0], index[1], index[2])

    def pending_writes(self) -> tuple[list[int], list[int], list[int]]:
        """``(rows, positions, slots)`` of the changes since the last call, recorded as
        written: the caller must ``write`` them (e.g. after uploading them with other
        host data in one copy) before the table is read."""
        rows: list[int] = []
        columns: list[int] = []
        values: list[int] = []
        for row, (start, end) in self.table.take_dirty_ranges().items():
            mirror = self._mirror.setdefault(row, [])
            if len(mirror) < end:
                mirror.extend([-1] * (end - len(mirror)))
            for position, slot in enumerate(self.table.slots(row, start, end), start):
                if mirror[position] != slot:
                    mirror[position] = slot
                    rows.append(row)
                    columns.append(position)
                    values.append(slot)
        return rows, columns, values

    def write(self, rows: torch.Tensor, positions: torch.Tensor, slots: torch.Tensor) -> None:
        """Scatter ``slots`` to ``(rows, positions)`` (int64 device tensors ``[M]``)."""
        if rows.numel():
            self.tensor[rows, positions] = slots.to(self.tensor.dtype)
