"""Captured forwards: one forward per graph, and the recording and replay of graphs that
hold several.

``engine.graphs.runner.GraphRunner`` decides which forwards replay and in which bucket;
this module holds what one such graph is. ``CapturedForward.capture`` records a forward
over a static ``ForwardBatch`` padded to a bucket of requests (or, for an extend whose
length varies, to a token bucket); ``CapturedForward.replay`` copies a real batch into the
front of the static buffers and replays it.

Replay (the order ``eagle_hal.hal.attention`` states for the graph hooks): the real
batch's tensors are copied into the front of the static buffers; padded requests get
table row 0, prefix length 0, position 0, token 0 and write their K/V to the padding
page's first slot (never allocated), so they read and disturb nothing real. The attention
backend's ``plan_for_replay`` hook refreshes its metadata, the graph replays with the host
updates ``replay_host_updates`` gives (``None`` for most backends), and the outputs are
sliced to the real tokens and copied out (the static outputs are overwritten by the next
replay). A token bucket's graph for any number of requests (``ragged``) gives its padding
tokens a request of their own, after the real ones.

The draft loop (``engine.graphs.draft_loop``) and the verify-accept-extend part of an
overlapped iteration (``engine.graphs.iteration``) hold several forwards in one graph.
``record_with_own_outputs`` records them with their outputs outside the shared graph pool,
and ``replay_forwards`` refreshes every forward's metadata in capture order before the one
replay (the contract for several forwards in one graph is in ``eagle_hal.hal.attention``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import torch

from eagle_hal.hal.attention import AttentionBackend, ForwardBatch
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture, merge_host_updates
from eagle_hal.hal.tree_mask import TreeMaskMode

__all__ = ["Body", "CapturedForward", "record_with_own_outputs", "replay_forwards",
           "static_batch"]

# what a captured forward runs: (static batch, static input features or None) -> outputs
Body = Callable[[ForwardBatch, "torch.Tensor | None"], tuple[torch.Tensor, ...]]


def static_batch(
    batch: ForwardBatch,
    bucket: int,
    *,
    pad_slot: int,
    tree_mask_mode: TreeMaskMode,
    tokens_per_request: int | None = None,
    ragged: bool = False,
) -> ForwardBatch:
    """Zeroed buffers of ``batch``'s shape padded to ``bucket`` requests (of
    ``tokens_per_request`` tokens each where given, else ``batch``'s; ``ragged``:
    ``tokens_per_request`` tokens in all, held by the first request), every slot the
    padding slot ``pad_slot``."""
    device = batch.input_ids.device
    n = tokens_per_request or batch.extend_lens_cpu[0]
    tokens = n if ragged else bucket * n
    lens = (n,) + (0,) * (bucket - 1) if ragged else (n,) * bucket
    long = dict(dtype=torch.int64, device=device)
    tree_mask = None
    if batch.tree_mask is not None:
        # padded requests see only themselves: any mask with a true diagonal would do
        if tree_mask_mode == TreeMaskMode.BIT_PACKED:  # [B, N] words
            node = torch.arange(n, **long)
            words = (torch.ones_like(node) << node).to(batch.tree_mask.dtype)
            tree_mask = words.expand(bucket, n).contiguous()
        else:  # tree-block [B, N, N]
            eye = torch.eye(n, dtype=batch.tree_mask.dtype, device=device)
            tree_mask = eye.expand(bucket, n, n).contiguous()
    draft_kv_slots = None
    if batch.draft_kv_slots is not None:
        depth = batch.draft_kv_slots.shape[1]
        draft_kv_slots = torch.full(
            (tokens, depth), pad_slot, dtype=batch.draft_kv_slots.dtype, device=device
        )
    return ForwardBatch(
        mode=batch.mode,
        input_ids=torch.zeros(tokens, **long),
        positions=torch.zeros(tokens, **long),
        table_rows=torch.zeros(bucket, **long),
        prefix_lens=torch.zeros(bucket, **long),
        extend_lens=torch.tensor(lens, **long),
        out_cache_loc=torch.full((tokens,), pad_slot, dtype=batch.out_cache_loc.dtype,
                                 device=device),
        prefix_lens_cpu=(0,) * bucket,
        extend_lens_cpu=lens,
        tree_mask=tree_mask,
        draft_kv_slots=draft_kv_slots,
        num_branches=batch.num_branches,
    )


@dataclasses.dataclass
class CapturedForward:
    """A forward captured over a static padded batch; see the module docstring."""

    graph: DeviceGraph
    batch: ForwardBatch  # the static, padded batch the graph reads
    hidden_in: torch.Tensor | None  # draft only: [static tokens, H] input features
    outputs: tuple[torch.Tensor, ...]  # static outputs, [static tokens, ...] each
    tokens_per_request: int
    pad_slot: int
    filled: int = 0  # real requests of the last replay; the rows past them hold padding
    padded: bool = False  # a token bucket's graph (padded to its tokens)
    filled_tokens: int = 0  # real tokens of the last replay
    ragged: bool = False  # a token bucket's graph for any number of requests

    @classmethod
    def capture(
        cls,
        capture: GraphCapture,
        batch: ForwardBatch,
        bucket: int,
        attn: AttentionBackend,
        hidden: torch.Tensor | None,
        body: Body,
        *,
        pad_slot: int,
        tree_mask_mode: TreeMaskMode,
        padded: int | None = None,
    ) -> CapturedForward:
        """Capture ``body`` over a static batch of ``bucket`` requests shaped like
        ``batch`` (``padded``: that many tokens, in one request unless ``attn`` has
        ``ragged_extend_graphs``). ``attn``'s graph state must be initialised."""
        ragged = padded is not None and attn.ragged_extend_graphs
        static = static_batch(batch, bucket, pad_slot=pad_slot, tree_mask_mode=tree_mask_mode,
                              tokens_per_request=padded, ragged=ragged)
        hidden_in = None
        if hidden is not None:
            hidden_in = hidden.new_zeros(static.num_tokens, *hidden.shape[1:])
        static.attn_metadata = attn.plan_for_capture(static)
        with capture.warmup():  # compiles kernels and settles lazy state off-graph
            body(static, hidden_in)
        graph = capture.new_graph()
        outputs = capture.record(graph, lambda: body(static, hidden_in))
        return cls(graph, static, hidden_in, outputs, padded or batch.extend_lens_cpu[0],
                   pad_slot, padded=padded is not None, ragged=ragged)

    def replay(
        self,
        batch: ForwardBatch,
        hidden: torch.Tensor | None,
        attn: AttentionBackend,
        upload: Callable[..., list[torch.Tensor]],
    ) -> tuple[torch.Tensor, ...]:
        """The outputs of ``batch`` (with input features ``hidden``, draft only), replayed;
        ``upload`` is the ``ModelRunner``'s (a ragged replay's lengths go through it)."""
        static = self.batch
        size, tokens = batch.batch_size, batch.num_tokens
        stale = self.filled > size  # a larger batch left real rows and slots behind
        # a token bucket's longer last run left real slots where padding now goes
        stale_tokens = self.filled_tokens > tokens
        self.filled, self.filled_tokens = size, tokens
        static.input_ids[:tokens].copy_(batch.input_ids)
        static.positions[:tokens].copy_(batch.positions)
        static.table_rows[:size].copy_(batch.table_rows)
        static.prefix_lens[:size].copy_(batch.prefix_lens)
        static.out_cache_loc[:tokens].copy_(batch.out_cache_loc)
        if stale:
            static.table_rows[size:].zero_()
            static.prefix_lens[size:].zero_()
        if stale or stale_tokens:
            static.out_cache_loc[tokens:].fill_(self.pad_slot)
        extend_lens = static.extend_lens_cpu
        if self.ragged:  # the real requests, then one holding the padding tokens
            padding = static.num_tokens - tokens
            extend_lens = (*batch.extend_lens_cpu, padding) + (0,) * (static.batch_size - size - 1)
            static.extend_lens.copy_(upload(extend_lens)[0])  # (pinned)
        if static.tree_mask is not None and batch.tree_mask is not None:
            rows = static.tree_mask[:size]
            rows.copy_(batch.tree_mask.reshape(rows.shape))
        if static.draft_kv_slots is not None and batch.draft_kv_slots is not None:
            static.draft_kv_slots[:tokens].copy_(batch.draft_kv_slots)
            if stale:
                static.draft_kv_slots[tokens:].fill_(self.pad_slot)
        if self.hidden_in is not None and hidden is not None:
            self.hidden_in[:tokens].copy_(hidden)
        view = dataclasses.replace(
            static,
            prefix_lens_cpu=tuple(batch.prefix_lens_cpu) + (0,) * (static.batch_size - size),
            extend_lens_cpu=extend_lens,
        )
        assert static.attn_metadata is not None
        attn.plan_for_replay(view, static.attn_metadata)
        self.graph.replay(attn.replay_host_updates(view, static.attn_metadata))
        return tuple(out[:tokens].clone() for out in self.outputs)


def record_with_own_outputs(
    capture: GraphCapture,
    graph: DeviceGraph,
    body: Callable[[], tuple[torch.Tensor, ...]],
    like: tuple[torch.Tensor, ...],
) -> tuple[torch.Tensor, ...]:
    """Record ``body`` into ``graph`` with its outputs in tensors allocated before the
    capture (shaped like ``like``, the warm-up's results), copied into at the end of the
    recorded work; returns them.

    Every graph of a ``GraphCapture`` shares one memory pool, and memory a capture frees
    (its intermediates) is handed to the captures after it. Outputs allocated inside a
    capture can therefore be the intermediates of a graph captured earlier and freed
    since, which that graph's next replay overwrites: a draft loop's verify tree, read
    after the target-verify graph replays, must not live in the pool.

    An output ``body`` returns as the very tensor of the warm-up (a part it built once from
    the shape alone, outside the pool, and never writes, such as a chain's verify layout)
    is returned as it is and costs the graph no copy."""
    own = tuple(torch.empty_like(t) for t in like)

    def recorded() -> tuple[torch.Tensor, ...]:
        copied = []
        for out, value, warm in zip(own, body(), like, strict=True):
            if value is not warm:
                out.copy_(value)
                copied.append(out)
        return tuple(copied)

    written = {id(t) for t in capture.record(graph, recorded)}
    return tuple(out if id(out) in written else warm for out, warm in zip(own, like, strict=True))


def replay_forwards(
    graph: DeviceGraph,
    forwards: Sequence[tuple[AttentionBackend, ForwardBatch]],
    prefix_lens_cpu: tuple[int, ...],
) -> None:
    """Replay a graph of several forwards whose static inputs are refreshed: each
    forward's metadata and host updates (``plan_for_replay``, ``replay_host_updates``) in
    capture order, with the batch's host prefix lengths, then the one replay with their
    host updates merged."""
    updates = []
    for attn, static in forwards:
        assert static.attn_metadata is not None
        view = dataclasses.replace(static, prefix_lens_cpu=prefix_lens_cpu)
        attn.plan_for_replay(view, static.attn_metadata)
        updates.append(attn.replay_host_updates(view, static.attn_metadata))
    graph.replay(merge_host_updates(updates))
