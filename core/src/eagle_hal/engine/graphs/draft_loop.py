"""The draft's loop captured as one device graph, for a draft tree of any ``TreeShape``.

The draft loop (``speculative.drafting``: ``draft_chain`` for a chain, K = 1 and N = S + 1,
``draft_tree`` for a tree of K branches) runs S - 1 DRAFT_DECODE forwards of the draft
head, each followed by its lm_head top-K (and, in a tree, a tree step: K*K candidates
scored, the best K kept, their parents' hidden states gathered), then lays out the verify
tree. Step by step, every forward costs a host-built ``ForwardBatch``, a replay with its
copies into static buffers, and the eager bookkeeping ops. ``DraftLoopGraph`` records the
whole loop into one graph per

    (bucket, TreeShape, hidden width and dtype, tree-mask layout).

What the graph records is the algorithm's own code: the caller passes the loop's body
(``DraftLoopBody``), which reads the static inputs ``DraftLoop`` gives it, runs each
level's forward over that level's static batch (``DraftLoop.forward``) and returns the
verify tree. This module knows the loop's shape, its static buffers and their refresh;
``speculative.drafting`` knows what a level computes. Its static inputs:

    rows, seq_lens, roots   [bucket]          table rows, cached lengths, verify roots
    probs, ids              [bucket, K]       the extend's top-K: the root's children
    hidden                  [bucket, H]       the draft's hidden state at the root
    scratch                 chain [bucket, S - 1], tree [S, bucket, K]: the K/V slot of
                            draft depth d + 1 (branch k), from the worker's reserved block

Level ``d`` (depth ``d + 1``) runs at position ``seq_len + d``, computed on the device
before the body, and writes its K/V at its scratch slots (views of the scratch input, so
refreshing the input refreshes every level's batch). The chain and the tree differ in
what a level attends to:

* a chain's step ``d`` attends to ``scratch[:, :d + 1]``, a view set on its static batch;
  its input ids are ``tokens[d]``, where ``ids`` is ``tokens[0]`` and the body writes each
  step's top-1 into the next row (a chain reads no draft probabilities: ``probs`` is
  ``None``);
* a tree's level ``d`` attends to its branches' ancestors, whose slots the body computes
  in the graph (``SamplingOps.draft_kv_slots``) and sets on the level's static batch,
  which is why the attention backend must read them in its forward
  (``draft_slots_read_in_forward``); the level's tokens are the body's own tensors.

The outputs are the verify tree's tensors (tree-block or bit-packed mask; ``FULL`` is
sized by host lengths and stays eager), outside the shared graph pool
(``engine.graphs.forward.record_with_own_outputs``): a verify graph captured before a draft
loop would otherwise overwrite the loop's tree before the accept reads it. Parts that
depend on the shape alone (a chain's index, links and mask) the body builds once at the
warm-up, outside the pool, in ``DraftLoop.constants``; the graph hands them back as they
are.

Each level has its own static ``ForwardBatch`` and attention metadata. Before the one
replay, ``replay`` refreshes the inputs and, level by level in capture order, the metadata
and host updates, as ``eagle_hal.hal.attention`` states for graphs of several forwards (the
attention backend must declare ``multi_forward_graphs``). Padded rows hold row 0, length 0,
zero probabilities, token 0, a zero hidden state and the padding slot, so they read and
write nothing real.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from eagle_hal.engine.graphs.forward import record_with_own_outputs, replay_forwards
from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture
from eagle_hal.hal.sampling import TreeShape, VerifyTree

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.speculative.drafting import DraftInputs

__all__ = ["DraftLoop", "DraftLoopBody", "DraftLoopGraph", "is_chain"]


def is_chain(shape: TreeShape) -> bool:
    """Whether ``shape`` is a chain (K = 1, N = S + 1), whose loop takes the chain layout."""
    return shape.topk == 1 and shape.num_draft_tokens == shape.num_steps + 1


class DraftLoop(NamedTuple):
    """What a draft-loop body reads and writes inside the graph (see the module docstring)."""

    shape: TreeShape
    mask_mode: str
    table_rows: torch.Tensor  # [bucket] int64 table rows
    seq_lens: torch.Tensor  # [bucket] int64 cached lengths: every level's prefix
    roots: torch.Tensor  # [bucket] int64 verify roots
    probs: torch.Tensor | None  # [bucket, K] float32 the root's children's probabilities
    ids: torch.Tensor  # [bucket, K] int64 their tokens (a chain's: a view of tokens[0])
    hidden: torch.Tensor  # [bucket, H] the draft's hidden state at the root
    scratch: torch.Tensor  # by request: chain [bucket, S - 1], tree [bucket, S, K] (a view)
    tokens: torch.Tensor  # [S, bucket * K] int64 the levels' static input ids
    steps: list[ForwardBatch]  # the S - 1 static DRAFT_DECODE batches, in capture order
    # (static batch, input ids [bucket * K], hidden [bucket * K, H]) -> the draft's hidden
    # states [bucket * K, H]: the level's draft forward
    forward: Callable[[ForwardBatch, torch.Tensor, torch.Tensor], torch.Tensor]
    # tensors the body builds once from the shape alone, at the warm-up (outside the
    # graph), and never writes after
    constants: dict[object, Any]


# the algorithm's loop: the static inputs in, the verify tree out
DraftLoopBody = Callable[[DraftLoop], VerifyTree]


@dataclasses.dataclass
class DraftLoopGraph:
    """One captured draft loop: its static inputs, per-level forwards and outputs."""

    graph: DeviceGraph
    chain: bool  # the chain layout (``is_chain``)
    mask_mode: str
    pad_slot: int
    table_rows: torch.Tensor
    seq_lens: torch.Tensor
    roots: torch.Tensor
    probs: torch.Tensor | None
    ids: torch.Tensor
    hidden: torch.Tensor
    scratch: torch.Tensor  # chain [bucket, S - 1], tree [S, bucket, K]
    by_request: torch.Tensor  # ``scratch`` with requests first (chain: itself)
    per_request: tuple[torch.Tensor, ...]  # the inputs a padded row zeroes
    forwards: tuple[tuple[AttentionBackend, ForwardBatch], ...]  # in capture order
    outputs: tuple[torch.Tensor, ...]  # the verify tree's tensors, [bucket, ...] each
    filled: int = 0  # real requests of the last replay; the rows past them hold padding

    @classmethod
    def capture(
        cls,
        capture: GraphCapture,
        draft: Any,
        attn: AttentionBackend,
        body: DraftLoopBody,
        *,
        bucket: int,
        shape: TreeShape,
        hidden: torch.Tensor,
        mask_mode: str,
        pad_slot: int,
        slot_dtype: torch.dtype,
    ) -> DraftLoopGraph:
        """Static inputs holding padding only, one static batch per level planned in
        capture order (``plan_for_capture``), a warm-up run of ``body``, then the recorded
        loop. ``hidden`` gives the hidden state's width, dtype and device."""
        device = hidden.device
        chain, topk, levels = is_chain(shape), shape.topk, shape.num_steps
        long: dict[str, Any] = dict(dtype=torch.int64, device=device)
        depth = levels - 1  # draft forwards; the last level is only predicted
        table_rows, seq_lens, roots = (torch.zeros(bucket, **long) for _ in range(3))
        tokens = torch.zeros(levels, bucket * topk, **long)
        positions = torch.zeros(depth, bucket, topk, **long)  # written inside the graph
        offsets = torch.arange(depth, **long)[:, None, None]  # level d at seq_len + d
        hidden_in = hidden.new_zeros(bucket, *hidden.shape[1:])
        extend_lens = torch.full((bucket,), topk, **long)
        if chain:  # the chain reads its first token where its steps write theirs
            scratch = torch.full((bucket, depth), pad_slot, dtype=slot_dtype, device=device)
            by_request, probs, ids = scratch, None, tokens[0].view(bucket, 1)
        else:
            scratch = torch.full((levels, bucket, topk), pad_slot, dtype=slot_dtype,
                                 device=device)
            by_request = scratch.transpose(0, 1)  # [bucket, S, K], as draft_kv_slots takes it
            probs = torch.zeros(bucket, topk, dtype=torch.float32, device=device)
            ids = torch.zeros(bucket, topk, **long)
        steps = []
        for d in range(depth):
            if chain:
                out_cache_loc, draft_kv_slots = scratch[:, d], scratch[:, : d + 1]
            else:  # the body sets the level's ancestor slots, computed in the graph
                out_cache_loc = scratch[d].view(-1)
                draft_kv_slots = torch.full((bucket * topk, d + 1), pad_slot, dtype=slot_dtype,
                                            device=device)
            static = ForwardBatch(
                mode=ForwardMode.DRAFT_DECODE,
                input_ids=tokens[d],
                positions=positions[d].view(-1),
                table_rows=table_rows,
                prefix_lens=seq_lens,
                extend_lens=extend_lens,
                out_cache_loc=out_cache_loc,
                prefix_lens_cpu=(0,) * bucket,
                extend_lens_cpu=(topk,) * bucket,
                draft_kv_slots=draft_kv_slots,
                num_branches=topk,
            )
            static.attn_metadata = attn.plan_for_capture(static)
            steps.append(static)

        def forward(static: ForwardBatch, input_ids: torch.Tensor,
                    state: torch.Tensor) -> torch.Tensor:
            return draft.forward(static, attn, input_ids, state)

        loop = DraftLoop(shape, mask_mode, table_rows, seq_lens, roots, probs, ids, hidden_in,
                         by_request, tokens, steps, forward, {})

        def recorded() -> tuple[torch.Tensor, ...]:
            positions.copy_((seq_lens[None, :, None] + offsets).expand(depth, bucket, topk))
            tree = body(loop)
            layout = (tree.tokens, tree.positions, tree.retrieve_index,
                      tree.retrieve_next_token, tree.retrieve_next_sibling, tree.tree_mask)
            return tuple(t.contiguous() for t in layout)

        with capture.warmup():  # compiles kernels and settles lazy state off-graph
            warm = recorded()
        graph = capture.new_graph()
        outputs = record_with_own_outputs(capture, graph, recorded, warm)
        per_request = tuple(t for t in (table_rows, seq_lens, probs, ids, hidden_in, roots)
                            if t is not None)
        return cls(graph, chain, mask_mode, pad_slot, table_rows, seq_lens, roots, probs, ids,
                   hidden_in, scratch, by_request, per_request,
                   tuple((attn, static) for static in steps), outputs)

    def replay(self, inputs: DraftInputs) -> VerifyTree:
        """Refresh the inputs with a batch of B <= bucket requests (``inputs.scratch``
        ``[B, >= S * K]`` in the worker's order: depth-major, then branch), then every
        level's metadata, and replay. The tree's tokens and positions are copies; its
        other tensors are views of the outputs, rewritten by the next replay (a chain's
        index, links and mask with the same values)."""
        size = len(inputs.seq_lens)
        state = inputs.state
        self.table_rows[:size].copy_(inputs.table_rows_device)
        self.seq_lens[:size].copy_(inputs.seq_lens_device)
        if self.chain:
            self.scratch[:size].copy_(inputs.scratch[:, : self.scratch.shape[1]])
            self.ids[:size].copy_(state.topk_ids[:, :1])
        else:
            levels, topk = self.scratch.shape[0], self.scratch.shape[2]
            self.by_request[:size].copy_(
                inputs.scratch[:, : levels * topk].view(size, levels, topk)
            )
            assert self.probs is not None
            self.probs[:size].copy_(state.topk_probs)
            self.ids[:size].copy_(state.topk_ids)
        self.hidden[:size].copy_(state.hidden)
        self.roots[:size].copy_(inputs.roots)
        if self.filled > size:  # a larger batch left real rows and slots behind
            for tensor in self.per_request:
                tensor[size:].zero_()
            self.by_request[size:].fill_(self.pad_slot)
        self.filled = size
        bucket = self.table_rows.shape[0]
        replay_forwards(self.graph, self.forwards,
                        tuple(inputs.seq_lens) + (0,) * (bucket - size))
        tokens, positions, *layout = (out[:size] for out in self.outputs)
        return VerifyTree(tokens.clone(), positions.clone(), *layout, self.mask_mode)
