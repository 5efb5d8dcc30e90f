"""An attention backend that runs a device library's kernel where it serves, the shared
backend everywhere else.

A vendor library often covers part of the contract: a paged decode kernel, a causal
flash-attention call. ``FastPathAttention`` routes each forward: ``plan`` asks ``serves``
whether the fast path takes the batch and plans it there (``plan_fast``) or hands it to
``fallback``; ``forward`` runs the fast kernel for metadata of ``metadata_type`` and the
fallback's forward for anything else, so every layer follows the plan its forward got.
The tree-mask layout is the fallback's (the fast path serves no verify tree), and the
graph hooks follow the same rule: a capture runs on the fast path only where ``captures``
says so, and a replay goes to whichever side planned the capture.

A model with sliding windows or soft-capped scores (``AttentionConfig``) runs every forward
on the fallback unless the subclass sets ``handles_windows``: a device library's kernel
called without a window would attend over the whole context.

A subclass sets ``metadata_type`` and implements ``serves``, ``plan_fast`` and
``forward_fast``; one whose kernel is captured also implements ``captures``,
``plan_fast_capture``, ``replay_fast`` and, if its graph API takes host updates,
``fast_host_updates``.
"""

from __future__ import annotations

import abc
from typing import TYPE_CHECKING, Any, ClassVar

from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, AttentionMetadata

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from eagle_hal.hal.attention import ForwardBatch

__all__ = ["FastPathAttention"]


class FastPathAttention(AttentionBackend):
    """The forwards ``serves`` accepts through a fast kernel; every other forward, and every
    capture ``captures`` declines, through ``fallback`` (metadata, forward and graph hooks
    alike)."""

    # The metadata ``plan_fast`` makes; a forward or replay holding one is the fast path's.
    metadata_type: ClassVar[type[AttentionMetadata]]
    # Whether ``forward_fast`` applies the config's sliding windows and soft-cap; if not,
    # a model that has either never takes the fast path.
    handles_windows: ClassVar[bool] = False

    def __init__(self, config: AttentionConfig, fallback: AttentionBackend) -> None:
        super().__init__(config)
        self.fallback = fallback
        self._fast_allowed = self.handles_windows or not (
            config.windowed or config.logit_softcap is not None)

    @property  # type: ignore[override]
    def tree_mask_mode(self) -> str:
        return self.fallback.tree_mask_mode

    @tree_mask_mode.setter
    def tree_mask_mode(self, mode: str) -> None:
        self.fallback.tree_mask_mode = mode

    # -- what a subclass supplies ----------------------------------------------------------

    @abc.abstractmethod
    def serves(self, batch: ForwardBatch) -> bool:
        """Whether the fast path plans and runs this eager forward."""

    @abc.abstractmethod
    def plan_fast(self, batch: ForwardBatch) -> AttentionMetadata:
        """The fast path's metadata (a ``metadata_type``) for a batch it ``serves``."""

    @abc.abstractmethod
    def forward_fast(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
        metadata: Any,
    ) -> torch.Tensor:
        """One layer's forward on the fast path, ``metadata`` being its own plan."""

    def captures(self, batch: ForwardBatch) -> bool:
        """Whether a capture of ``batch``'s shape runs on the fast path. The default: none
        does, every capture is the fallback's."""
        return False

    def plan_fast_capture(self, batch: ForwardBatch) -> AttentionMetadata:
        """The fast path's ``plan_for_capture``, for a batch it ``captures``."""
        raise NotImplementedError(f"{type(self).__name__} captures nothing on its fast path")

    def replay_fast(self, batch: ForwardBatch, metadata: Any) -> None:
        """The fast path's ``plan_for_replay``. The default hands it to the fallback, which
        planned every capture when ``captures`` is not overridden."""
        self.fallback.plan_for_replay(batch, metadata)

    def fast_host_updates(self, batch: ForwardBatch, metadata: Any) -> dict[str, Any] | None:
        """The fast path's ``replay_host_updates``. The default hands it to the fallback,
        which planned every capture when ``captures`` is not overridden."""
        return self.fallback.replay_host_updates(batch, metadata)

    # -- the contract, routed ------------------------------------------------------------

    def plan(self, batch: ForwardBatch) -> AttentionMetadata:
        if self._fast_allowed and self.serves(batch):
            return self.plan_fast(batch)
        return self.fallback.plan(batch)

    def init_graph_state(self, max_batch_size: int, max_tokens: int) -> None:
        self.fallback.init_graph_state(max_batch_size, max_tokens)

    def plan_for_capture(self, batch: ForwardBatch) -> AttentionMetadata:
        if self._fast_allowed and self.captures(batch):
            return self.plan_fast_capture(batch)
        return self.fallback.plan_for_capture(batch)

    def plan_for_replay(self, batch: ForwardBatch, metadata: AttentionMetadata) -> None:
        if isinstance(metadata, self.metadata_type):
            self.replay_fast(batch, metadata)
        else:
            self.fallback.plan_for_replay(batch, metadata)

    def replay_host_updates(
        self, batch: ForwardBatch, metadata: AttentionMetadata
    ) -> dict[str, Any] | None:
        if isinstance(metadata, self.metadata_type):
            return self.fast_host_updates(batch, metadata)
        return self.fallback.replay_host_updates(batch, metadata)

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        metadata = batch.attn_metadata
        if isinstance(metadata, self.metadata_type):
            return self.forward_fast(layer, q, k, v, batch, metadata)
        return self.fallback.forward(layer, q, k, v, batch)
