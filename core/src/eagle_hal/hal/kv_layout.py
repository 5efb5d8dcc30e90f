"""How a backend wants per-layer K/V storage laid out."""

from __future__ import annotations

import dataclasses

__all__ = ["KVLayout"]


@dataclasses.dataclass(frozen=True, slots=True)
class KVLayout:
    """Per-layer K/V storage layout.

    ``order`` is ``"NHD"`` (storage ``[num_slots, num_kv_heads, head_dim]``) or ``"HND"``
    (``[num_kv_heads, num_slots, head_dim]``). A slot is ``page * page_size + offset``; pages
    are the unit of allocation. ``slot_dtype`` is the integer dtype of slot indices the
    backend's kernels read (some vendor kernels want int32).
    """

    order: str = "NHD"
    page_size: int = 1
    slot_dtype: str = "int64"

    def __post_init__(self) -> None:
        if self.order not in ("NHD", "HND"):
            raise ValueError(f"KV layout order must be 'NHD' or 'HND', got {self.order!r}")
        if self.page_size < 1:
            raise ValueError(f"page size must be >= 1, got {self.page_size}")
        if self.slot_dtype not in ("int32", "int64"):
            raise ValueError(f"slot dtype must be int32 or int64, got {self.slot_dtype!r}")

    def with_page_size(self, page_size: int) -> KVLayout:
        return dataclasses.replace(self, page_size=page_size)
