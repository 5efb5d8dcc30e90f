"""The draft's chain loop captured as one device graph, for ``engine.graph_draft_loop``.

``speculative.drafting.draft_chain`` (top-1, S steps) runs S - 1 DRAFT_DECODE forwards of the
draft head, each followed by its lm_head top-1, then lays the chain out as a verify tree.
Step by step, every forward costs a host-built ``ForwardBatch``, a replay with its copies
into static buffers, and the eager top-1 and layout ops. ``ChainGraph`` records all of it
into one graph for one ``(bucket, S)``, whose static inputs are what the loop derives
everything from:

    rows, seq_lens, roots   [bucket]         table rows, cached lengths, verify roots
    scratch                 [bucket, S - 1]  slot of draft depth d + 1 (the worker's block)
    tokens[0]               [bucket]         the first draft token (top-1 of the extend)
    hidden                  [bucket, H]      the draft's hidden state at the root

Inside the graph, step ``d`` (depth ``d + 1``) runs at positions ``seq_len + d``, computed
on the device; writes its K/V at ``scratch[:, d]`` and attends to ``scratch[:, :d + 1]``
(views of the scratch input, so refreshing the input refreshes every step's batch); and its
top-1 token is written to ``tokens[d + 1]``, the next step's input ids. The outputs are the
verify tree of ``speculative.drafting.chain_layout`` (tree-block or bit-packed mask): the graph
computes its tokens and positions; the rest (index, links, mask) depends on the bucket and
S alone and is built once, before the capture.

Each step has its own static ``ForwardBatch`` and attention metadata. Before the one replay,
``replay`` refreshes the inputs and, step by step in capture order, the metadata and host
updates, as ``eagle_hal.hal.attention`` states for graphs of several forwards (the
attention backend must declare ``multi_forward_graphs``). Padded rows hold row 0, length 0,
token 0, a zero hidden state and the padding slot, so they read and write nothing real.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture, merge_host_updates
from eagle_hal.hal.sampling import VerifyTree
from eagle_hal.speculative.drafting import chain_layout

__all__ = ["ChainGraph", "record_with_own_outputs", "replay_draft_loop"]


def record_with_own_outputs(
    capture: GraphCapture,
    graph: DeviceGraph,
    body: Callable[[], tuple[torch.Tensor, ...]],
    like: tuple[torch.Tensor, ...],
) -> tuple[torch.Tensor, ...]:
    """Record ``body`` into ``graph`` with its outputs in tensors allocated before the
    capture (shaped like ``like``, e.g. the warm-up's results), copied into at the end of
    the recorded work; returns them.

    Every graph of a ``GraphCapture`` shares one memory pool, and memory a capture frees
    (its intermediates) is handed to the captures after it. Outputs allocated inside a
    capture can therefore be the intermediates of a graph captured earlier and freed
    since, which that graph's next replay overwrites: a draft loop's verify tree, read
    after the target-verify graph replays, must not live in the pool."""
    outputs = tuple(torch.empty_like(t) for t in like)

    def recorded() -> tuple[torch.Tensor, ...]:
        for out, value in zip(outputs, body(), strict=True):
            out.copy_(value)
        return outputs

    capture.record(graph, recorded)
    return outputs


def replay_draft_loop(
    graph: DeviceGraph,
    attn: AttentionBackend,
    steps: Sequence[ForwardBatch],
    bucket: int,
    seq_lens_cpu: Sequence[int],
    outputs: tuple[torch.Tensor, ...],
    mask_mode: str,
) -> VerifyTree:
    """The replay of a draft-loop graph (chain or tree) whose static inputs are refreshed:
    every step's metadata and host updates in capture order (the several-forwards
    contract, ``eagle_hal.hal.attention``) with the batch's host lengths, one replay, and
    the verify tree of the real requests: tokens and positions copied, the other tensors
    views of ``outputs``."""
    size = len(seq_lens_cpu)
    prefix_lens_cpu = tuple(seq_lens_cpu) + (0,) * (bucket - size)
    updates = []
    for static in steps:
        assert static.attn_metadata is not None
        view = dataclasses.replace(static, prefix_lens_cpu=prefix_lens_cpu)
        attn.plan_for_replay(view, static.attn_metadata)
        updates.append(attn.replay_host_updates(view, static.attn_metadata))
    graph.replay(merge_host_updates(updates))
    tokens, positions, *layout = (out[:size] for out in outputs)
    return VerifyTree(tokens.clone(), positions.clone(), *layout, mask_mode)


@dataclasses.dataclass
class ChainGraph:
    """One captured chain loop: its static inputs, per-step batches and outputs."""

    graph: DeviceGraph
    attn: AttentionBackend
    mask_mode: str
    pad_slot: int
    rows: torch.Tensor  # [bucket] int64 table rows
    seq_lens: torch.Tensor  # [bucket] int64 cached lengths: every step's prefix
    scratch: torch.Tensor  # [bucket, S - 1] slot dtype: K/V slot of draft depth d + 1
    tokens: torch.Tensor  # [S, bucket] int64 chain by depth; row 0 is an input
    hidden: torch.Tensor  # [bucket, H] the draft's hidden state at the root
    roots: torch.Tensor  # [bucket] int64 verify roots
    steps: list[ForwardBatch]  # the S - 1 static DRAFT_DECODE batches, in capture order
    outputs: tuple[torch.Tensor, ...]  # the verify tree's tensors, [bucket, ...] each
    filled: int = 0  # real requests of the last replay; the rows past them hold padding

    @classmethod
    def capture(
        cls,
        capture: GraphCapture,
        draft: Any,
        attn: AttentionBackend,
        *,
        bucket: int,
        steps: int,
        hidden: torch.Tensor,
        mask_mode: str,
        pad_slot: int,
        slot_dtype: torch.dtype,
    ) -> ChainGraph:
        """Static inputs holding padding only, one static batch per step planned in
        capture order (``plan_for_capture``), a warm-up run, then the recorded loop.
        ``hidden`` gives the hidden state's width, dtype and device."""
        device = hidden.device
        long: dict[str, Any] = dict(dtype=torch.int64, device=device)
        depth = steps - 1  # draft forwards; the last chain token is only predicted
        rows, seq_lens, roots = (torch.zeros(bucket, **long) for _ in range(3))
        scratch = torch.full((bucket, depth), pad_slot, dtype=slot_dtype, device=device)
        tokens = torch.zeros(steps, bucket, **long)
        positions = torch.zeros(depth, bucket, **long)  # written inside the graph
        offsets = torch.arange(depth, **long)[:, None]  # [S - 1, 1]: step d at seq_len + d
        hidden_in = hidden.new_zeros(bucket, *hidden.shape[1:])
        ones = torch.ones(bucket, **long)
        step_batches = []
        for d in range(depth):
            static = ForwardBatch(
                mode=ForwardMode.DRAFT_DECODE,
                input_ids=tokens[d],
                positions=positions[d],
                req_pool_indices=rows,
                prefix_lens=seq_lens,
                extend_lens=ones,
                out_cache_loc=scratch[:, d],
                prefix_lens_cpu=(0,) * bucket,
                extend_lens_cpu=(1,) * bucket,
                draft_kv_slots=scratch[:, : d + 1],  # [bucket, d + 1] the chain so far
                num_branches=1,
            )
            static.attn_metadata = attn.plan_for_capture(static)
            step_batches.append(static)

        # the layout's parts that depend on the shape alone (index, links, mask): built by
        # the warm-up, outside the graph pool, and never written after
        shape_parts: dict[object, tuple[torch.Tensor, ...]] = {}

        def loop() -> tuple[torch.Tensor, ...]:
            positions.copy_(seq_lens[None, :] + offsets)  # [S - 1, bucket]
            state = hidden_in
            for d, static in enumerate(step_batches):
                state = draft.forward(static, attn, static.input_ids, state)  # [bucket, H]
                _, ids = draft.topk(state, 1)  # [bucket, 1]
                tokens[d + 1].copy_(ids[:, 0])
            tree = chain_layout(roots, tokens.t(), seq_lens, mask_mode, shape_parts)
            return tree.tokens, tree.positions

        with capture.warmup():  # compiles kernels and settles lazy state off-graph
            warm = loop()
            tree = chain_layout(roots, tokens.t(), seq_lens, mask_mode, shape_parts)
        graph = capture.new_graph()
        outputs = (*record_with_own_outputs(capture, graph, loop, warm), tree.retrieve_index,
                   tree.retrieve_next_token, tree.retrieve_next_sibling, tree.tree_mask)
        return cls(graph, attn, mask_mode, pad_slot, rows, seq_lens, scratch, tokens,
                   hidden_in, roots, step_batches, outputs)

    def replay(
        self,
        rows: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Sequence[int],
        scratch: torch.Tensor,
        first_tokens: torch.Tensor,
        hidden: torch.Tensor,
        roots: torch.Tensor,
    ) -> VerifyTree:
        """Refresh the inputs with a batch of B <= bucket requests (shapes as in
        ``GraphRunner.run_draft_chain``), then every step's metadata, and replay. The tree's
        tokens and positions are copies; its other tensors are views of the outputs, which
        every replay rewrites with the same values."""
        size = len(seq_lens_cpu)
        self.rows[:size].copy_(rows)
        self.seq_lens[:size].copy_(seq_lens)
        self.scratch[:size].copy_(scratch[:, : self.scratch.shape[1]])
        self.tokens[0, :size].copy_(first_tokens)
        self.hidden[:size].copy_(hidden)
        self.roots[:size].copy_(roots)
        if self.filled > size:  # a larger batch left real rows and slots behind
            for tensor in (self.rows, self.seq_lens, self.tokens[0], self.hidden, self.roots):
                tensor[size:].zero_()
            self.scratch[size:].fill_(self.pad_slot)
        self.filled = size
        return replay_draft_loop(self.graph, self.attn, self.steps, self.rows.shape[0],
                                 seq_lens_cpu, self.outputs, self.mask_mode)
