"""The attention-backend contract: forward modes, the per-forward batch, planning, graph hooks.

Every model layer calls ``AttentionBackend.forward(layer, q, k, v, batch)``. The backend
writes the new K/V into the KV store at ``batch.out_cache_loc`` and attends. What a query
token sees depends on the mode; in every mode it sees its request's cached prefix, the
slots ``req_to_token[req, 0:prefix_len]``, plus:

* ``EXTEND`` / ``DECODE`` / ``DRAFT_EXTEND``: the request's new tokens causally. Their slots
  are ``req_to_token[req, prefix_len : prefix_len + extend_len]`` (equal to the request's run
  of ``out_cache_loc``); the engine writes the table before the forward.
* ``TARGET_VERIFY``: the request's N tree tokens (slots in ``out_cache_loc``) as allowed by
  ``tree_mask``, in the layout the backend asked for (``tree_mask_mode``).
* ``DRAFT_DECODE``: K branches per request; branch row r (request-major, ``r = b * K + k``)
  sees the slots ``draft_kv_slots[r, :]``: its ancestors among earlier draft tokens, then
  itself (the last column equals ``out_cache_loc[r]``).

Sliding windows and soft-capping (``AttentionConfig.layer_windows``, ``logit_softcap``; a
backend that implements them says so in ``Capabilities.sliding_window`` and
``Capabilities.logit_softcap``, and the engine builds no windowed or capped config for one
that does not). A layer of window ``W`` lets a query at position ``p`` see only the keys at
positions ``> p - W``: ``W`` keys, itself included, as Hugging Face's sliding-window mask.
Positions: cached prefix slot ``req_to_token[req, c]`` is at position ``c``; this forward's
tokens are at their ``batch.positions`` (a causal extend's token ``i`` at ``prefix_len + i``,
a tree node at ``prefix_len`` plus its depth, the number of its ancestors); in DRAFT_DECODE
the columns of ``draft_kv_slots`` are consecutive positions ending at the query's. The
window applies on top of each mode's visibility (a tree node still sees only its ancestors
among the tree). Soft-capping replaces each score ``s = scaling * q . k`` by
``cap * tanh(s / cap)`` before the softmax.

Planning (``plan``) runs once per forward and builds backend-specific metadata (a subclass
of ``AttentionMetadata``); ``forward`` runs once per layer and reads
``batch.attn_metadata``. The graph hooks let the core's graph runner capture a forward with
static metadata buffers and refresh them in place before each replay.

Graph capture, in order (``engine.graphs.runner`` and the conformance graphs area both
follow it): ``init_graph_state`` once; ``plan_for_capture`` on a static batch, whose
tensors the graph then reads for its whole life; a warm-up ``forward`` and the captured
one. Before each replay the caller writes the replayed batch into the static batch's
tensors in place (same shape: mode, requests, tokens per request, branches, draft depth,
except the per-request lengths of a ragged extend, see ``plan_for_replay``; any prefix
lengths, rows, slots and mask contents) and writes ``req_to_token``, then calls
``plan_for_replay`` with the static batch carrying the replayed batch's host lengths.
Anything the captured forward read on the host is fixed at capture, except what the
device's graph API refreshes itself: ``replay_host_updates`` (same arguments, right after
``plan_for_replay``) returns those values, and the caller passes them to
``DeviceGraph.replay(host_updates)`` (NPU graphs take the fused attention's host sequence
lengths this way; backends whose kernels read device buffers only return ``None``).

Several forwards in one graph (the draft's chain loop: S - 1 DRAFT_DECODE steps, each with
its own draft depth, in one replay). Only for backends that set ``multi_forward_graphs``;
the caller follows the order above per forward: ``plan_for_capture`` once per forward, on
that forward's own static batch, in the order the forwards will run; one warm-up and one
``record`` of all of them. Before each replay it refreshes every static batch in place,
then, forward by forward in capture order, calls ``plan_for_replay`` and
``replay_host_updates``, merges the host updates (``hal.graphs.merge_host_updates``) and
replays once. Such a backend guarantees:

* forwards do not disturb each other's metadata: no tensor that ``plan_for_replay`` writes
  is shared by the metadata of two ``plan_for_capture`` calls (read-only tensors, such as
  index runs that depend on the batch shape alone, may be shared);
* the hooks read a batch's index tensors (``table_rows``, ``prefix_lens``,
  ``extend_lens``, ``out_cache_loc``, ``draft_kv_slots``, ``tree_mask``, which may be
  strided views of one shared static buffer) and its host lengths, never the values of
  ``input_ids`` or ``positions``: inside the graph those come from the forward before (its
  sampled token, its step's position), so they are stale when the hooks run;
* ``replay_host_updates`` maps each key to a list with one entry per call the forward's
  capture made of the device API that takes the update, in call order (or returns
  ``None``), so that the forwards' lists, concatenated key by key in capture order, are
  the whole graph's update.
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

if TYPE_CHECKING:  # pragma: no cover
    import torch

    from eagle_hal.hal.kv_layout import KVLayout

__all__ = [
    "AttentionBackend",
    "AttentionConfig",
    "AttentionMetadata",
    "ForwardBatch",
    "ForwardMode",
    "KVStore",
]


class ForwardMode(enum.Enum):
    EXTEND = "extend"  # prefill: ragged new tokens per request, causal
    DECODE = "decode"  # one new token per request
    TARGET_VERIFY = "target_verify"  # N tree tokens per request under a tree mask
    DRAFT_DECODE = "draft_decode"  # K draft branches per request, each over its own ancestors
    DRAFT_EXTEND = "draft_extend"  # the draft consumes accepted tokens after verify, causal

    @property
    def is_causal_extend(self) -> bool:
        return self in (ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.DRAFT_EXTEND)


class KVStore(Protocol):
    """Per-layer K/V storage, as the engine's KV cache provides it."""

    layout: KVLayout
    num_layers: int

    def k_buffer(self, layer: int) -> torch.Tensor:
        """Key storage of one layer, ``[num_slots, num_kv_heads, head_dim]`` for NHD."""
        ...

    def v_buffer(self, layer: int) -> torch.Tensor:
        """Value storage of one layer, same shape as ``k_buffer``."""
        ...

    def write_kv(self, layer: int, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store ``k``/``v`` ``[T, num_kv_heads, head_dim]`` at ``slots`` ``[T]``."""
        ...


@dataclasses.dataclass(frozen=True, slots=True)
class AttentionConfig:
    """The geometry of one model's attention, and the storage it runs over."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    num_layers: int
    scaling: float
    kv_store: KVStore
    req_to_token: torch.Tensor  # [max_requests, max_context] slot of each request position
    # each layer's sliding window (None: full attention); empty: no layer has one. See
    # the module docstring for the positions it counts in.
    layer_windows: tuple[int | None, ...] = ()
    logit_softcap: float | None = None  # scores become cap * tanh(score / cap)

    def __post_init__(self) -> None:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.layer_windows and len(self.layer_windows) != self.num_layers:
            raise ValueError(
                f"layer_windows has {len(self.layer_windows)} entries for {self.num_layers} "
                "layers"
            )
        if any(w is not None and w < 1 for w in self.layer_windows):
            raise ValueError(f"sliding windows must be >= 1, got {self.layer_windows}")
        if self.logit_softcap is not None and not self.logit_softcap > 0:
            raise ValueError(f"logit_softcap must be > 0, got {self.logit_softcap}")

    def window(self, layer: int) -> int | None:
        """Layer ``layer``'s sliding window, ``None`` for full attention."""
        return self.layer_windows[layer] if self.layer_windows else None

    @property
    def windowed(self) -> bool:
        """Whether any layer has a sliding window."""
        return any(w is not None for w in self.layer_windows)


@dataclasses.dataclass
class AttentionMetadata:
    """Base of backend-specific per-forward metadata. Backends subclass it."""


@dataclasses.dataclass
class ForwardBatch:
    """One forward pass of one model over a batch of requests.

    Tensors live on the backend's device; the ``*_cpu`` tuples are host copies the engine
    already has, so planning needs no device-to-host sync. Token order is request-major.
    """

    mode: ForwardMode
    input_ids: torch.Tensor  # [T]
    positions: torch.Tensor  # [T] rotary positions
    table_rows: torch.Tensor  # [B] rows of the req_to_token table
    prefix_lens: torch.Tensor  # [B] cached tokens every query of the request sees
    extend_lens: torch.Tensor  # [B] query tokens per request; T = sum(extend_lens)
    out_cache_loc: torch.Tensor  # [T] slots where this forward's K/V are written
    prefix_lens_cpu: tuple[int, ...]
    extend_lens_cpu: tuple[int, ...]
    tree_mask: torch.Tensor | None = None  # TARGET_VERIFY, in the backend's tree_mask_mode
    draft_kv_slots: torch.Tensor | None = None  # DRAFT_DECODE, [B * K, depth]
    num_branches: int = 1  # K in DRAFT_DECODE
    attn_metadata: AttentionMetadata | None = None  # set by the runner after plan()

    @property
    def batch_size(self) -> int:
        return len(self.extend_lens_cpu)

    @property
    def num_tokens(self) -> int:
        return int(self.input_ids.shape[0])


_Metadata = TypeVar("_Metadata", bound="AttentionMetadata")


class AttentionBackend(abc.ABC):
    """Attention for one model over its KV store, in every forward mode.

    Subclasses set ``tree_mask_mode`` to the ``TreeMaskMode`` their verify kernel reads.
    """

    tree_mask_mode: str = "tree_block"
    # Whether several forwards, each planned by its own ``plan_for_capture``, may be
    # captured into one graph; setting it promises the guarantees the module docstring
    # lists under "several forwards in one graph". Off by default: the graph runner then
    # captures one forward per graph.
    multi_forward_graphs: bool = False
    # Whether a DRAFT_DECODE forward reads the values of ``draft_kv_slots`` itself, the
    # hooks (``plan_for_capture``, ``plan_for_replay``, ``replay_host_updates``) at most
    # its shape. Then, inside a graph of several forwards, the slots may be written by the
    # ops before the forward: the draft-loop graph (``engine.graphs.draft_loop``) computes each
    # level's ancestor slots from the levels before it. Off by default: trees then draft
    # level by level.
    draft_slots_read_in_forward: bool = False
    # Whether every forward reads the prefix lengths only from the batch's device tensors
    # (``prefix_lens``), never from ``prefix_lens_cpu``, which may then be any upper bound
    # of them. Then a decode iteration can be launched before the host knows how far the
    # previous one advanced (``speculative.speculative_overlap``). Off by default.
    lengths_read_in_forward: bool = False
    # Whether a causal extend (EXTEND, DRAFT_EXTEND) captured once may replay with other
    # per-request lengths: the graph runner then captures one prefill graph per token
    # bucket for any number of requests (``plan_for_replay`` says how). Off by default:
    # only one-request extends are padded to a token bucket, and several prompts at once
    # run eagerly.
    ragged_extend_graphs: bool = False

    def __init__(self, config: AttentionConfig) -> None:
        self.config = config

    def warm_up_lengths(self) -> tuple[int, ...]:
        """Token counts of single causal forwards (prefills) that, run once each, compile
        every kernel variant this backend picks by a forward's size, so that none compiles
        later inside timed work. The default: none (nothing is chosen by size)."""
        return ()

    def planned_metadata(self, batch: ForwardBatch, kind: type[_Metadata]) -> _Metadata:
        """``batch.attn_metadata``, which must be a ``kind`` made by this backend's ``plan``
        (raises ``TypeError`` naming what it got)."""
        metadata = batch.attn_metadata
        if not isinstance(metadata, kind):
            raise TypeError(
                f"batch.attn_metadata must come from {type(self).__name__}.plan(), got "
                f"{type(metadata).__name__}"
            )
        return metadata

    @abc.abstractmethod
    def plan(self, batch: ForwardBatch) -> AttentionMetadata:
        """Build this forward's metadata (index tensors, lengths). Called once per forward,
        before any layer; must not read device tensors back to the host."""

    @abc.abstractmethod
    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Write ``k``/``v`` ``[T, num_kv_heads, head_dim]`` at ``batch.out_cache_loc`` in
        layer ``layer``'s storage, then attend with ``q`` ``[T, num_heads, head_dim]`` as the
        mode prescribes. Returns ``[T, num_heads, head_dim]``."""

    # -- graph-state hooks, driven by the core's graph runner --------------------------

    def init_graph_state(self, max_batch_size: int, max_tokens: int) -> None:
        """Allocate static metadata buffers for batches up to ``max_batch_size`` requests
        and ``max_tokens`` query tokens; called once, before the first
        ``plan_for_capture``. Backends that cannot be captured do nothing."""
        return

    def plan_for_capture(self, batch: ForwardBatch) -> AttentionMetadata:
        """Metadata for capturing forwards of ``batch``'s shape, backed by static buffers
        that outlive the graph. ``batch`` is the static batch the graph will read; its
        host lengths need not match those of later replays (prefixes may grow)."""
        return self.plan(batch)

    def plan_for_replay(self, batch: ForwardBatch, metadata: AttentionMetadata) -> None:
        """Refresh ``metadata`` for a replay, in place (``copy_`` into its tensors).

        ``batch`` is the captured static batch: its tensors already hold the replayed
        batch's values; its ``prefix_lens_cpu`` / ``extend_lens_cpu`` are the replayed
        batch's. Rebinding a field of ``metadata`` or of ``batch`` is not seen by the
        replay, nor is any host value changed after capture. Raises ``ValueError`` for a
        batch of another shape than the capture's.

        A one-request ``EXTEND`` or ``DRAFT_EXTEND`` padded to a token bucket (the graph
        runner's prefill graphs) comes with the bucket's length as its extend length: its
        real tokens first, then padding tokens whose ``out_cache_loc`` is the padding slot
        and whose outputs are discarded. Causal attention must keep the real tokens from
        seeing the padding; the request's table row is reserved only up to its real
        length (the runner never pads past the row's width), so entries past it are not
        the padding tokens' slots.

        With ``ragged_extend_graphs``, a causal extend is captured as ``B`` requests (one
        more than the most the runner replays) whose lengths sum to the token bucket ``T``:
        all ``T`` tokens in the first request, none in the others. A replay brings the
        real requests first, then one padding request that holds the ``T - t`` padding
        tokens after the ``t`` real ones (table row 0, prefix 0, every slot the padding
        slot), then requests of no tokens; ``extend_lens`` (device and host) says so.
        The backend must rebuild whatever it derived from the lengths; the real requests'
        attention must not see the padding request's tokens; and it must read a
        request's table row only up to its prefix (the padding request's ``T - t``
        tokens may outnumber the row's entries)."""
        raise NotImplementedError(f"{type(self).__name__} does not support graph replay")

    def replay_host_updates(
        self, batch: ForwardBatch, metadata: AttentionMetadata
    ) -> dict[str, Any] | None:
        """Host-side values the captured forward needs refreshed for this replay, to be
        passed as ``DeviceGraph.replay(host_updates)``; called after ``plan_for_replay``
        with the same arguments. The default, ``None``, suits backends whose captured
        kernels read everything from device buffers. With ``multi_forward_graphs``, each
        value is a list with one entry per captured call, in call order."""
        return None
