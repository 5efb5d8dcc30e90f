"""The draft's tree loop captured as one device graph, for ``engine.graph_draft_loop``.

``speculative.drafting.draft_tree`` (top-K, S levels, N verify nodes) runs S - 1 DRAFT_DECODE
forwards of the draft head over a frontier of K branches per request, each followed by the
lm_head top-K and a tree step (``SamplingOps.grow_tree_step``: K*K candidates scored, the
best K kept, their parents' hidden states gathered), then selects the N - 1 best nodes and
lays them out as the verify tree. Step by step every level costs a host-built batch, a
replay with its copies and a dozen eager bookkeeping ops. ``TreeGraph`` records the whole
loop into one graph per ``(bucket, S, K, N)``, the way ``engine.chain_graph`` does for the
chain (K = 1). Its static inputs:

    rows, seq_lens, roots   [bucket]          table rows, cached lengths, verify roots
    scratch                 [S, bucket, K]    slot of draft depth d + 1, branch k
    probs, ids              [bucket, K]       the extend's top-K: the root's children
    hidden                  [bucket, H]       the draft's hidden state at the root

Inside the graph, level ``d`` (depth ``d + 1``) runs its K branches at position
``seq_len + d``, computed on the device; writes their K/V at ``scratch[d]`` (a view:
refreshed with the input) and lets each attend to its ancestors' scratch slots
(``SamplingOps.draft_kv_slots``, computed in the graph and set on the level's static
batch, which is why the attention backend must read them in its forward:
``draft_slots_read_in_forward``); the level's tokens (the tree step's choice) are the next
level's input ids where the step wrote them. Everything between is the eager loop's own
code, so the graph computes what the loop does. The outputs are
``SamplingOps.build_verify_tree``'s (tree-block or bit-packed mask; ``FULL`` is sized by
host lengths and stays eager).

Padded rows hold row 0, length 0, zero probabilities, token 0, a zero hidden state and the
padding slot, so they read and write nothing real. Attention backends must also declare
``multi_forward_graphs`` (one static batch and metadata per level).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import torch

from eagle_hal.engine.chain_graph import record_with_own_outputs, replay_draft_loop
from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture
from eagle_hal.hal.sampling import SamplingOps, TreeShape, VerifyTree

__all__ = ["TreeGraph"]


@dataclasses.dataclass
class TreeGraph:
    """One captured tree loop: its static inputs, per-level batches and outputs."""

    graph: DeviceGraph
    attn: AttentionBackend
    mask_mode: str
    pad_slot: int
    rows: torch.Tensor  # [bucket] int64 table rows
    seq_lens: torch.Tensor  # [bucket] int64 cached lengths: every level's prefix
    scratch: torch.Tensor  # [S, bucket, K] slot dtype: K/V slot of depth d + 1, branch k
    probs: torch.Tensor  # [bucket, K] float32 the root's children's draft probabilities
    ids: torch.Tensor  # [bucket, K] int64 their tokens
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
        ops: SamplingOps,
        *,
        bucket: int,
        shape: TreeShape,
        hidden: torch.Tensor,
        mask_mode: str,
        pad_slot: int,
        slot_dtype: torch.dtype,
    ) -> TreeGraph:
        """Static inputs holding padding only, one static batch per level planned in
        capture order (``plan_for_capture``), a warm-up run, then the recorded loop.
        ``hidden`` gives the hidden state's width, dtype and device."""
        device = hidden.device
        topk, levels = shape.topk, shape.num_steps
        long: dict[str, Any] = dict(dtype=torch.int64, device=device)
        rows, seq_lens, roots = (torch.zeros(bucket, **long) for _ in range(3))
        scratch = torch.full((levels, bucket, topk), pad_slot, dtype=slot_dtype, device=device)
        probs = torch.zeros(bucket, topk, dtype=torch.float32, device=device)
        ids = torch.zeros(bucket, topk, **long)
        hidden_in = hidden.new_zeros(bucket, *hidden.shape[1:])
        depth = levels - 1  # draft forwards; the last level is only predicted
        tokens = torch.zeros(depth, bucket * topk, **long)  # the levels' input ids, to plan
        positions = torch.zeros(depth, bucket, topk, **long)  # written inside the graph
        offsets = torch.arange(depth, **long)[:, None, None]  # level d at seq_len + d
        branches = torch.full((bucket,), topk, **long)
        step_batches = []
        for d in range(depth):
            static = ForwardBatch(
                mode=ForwardMode.DRAFT_DECODE,
                input_ids=tokens[d],
                positions=positions[d].view(-1),
                req_pool_indices=rows,
                prefix_lens=seq_lens,
                extend_lens=branches,
                out_cache_loc=scratch[d].view(-1),
                prefix_lens_cpu=(0,) * bucket,
                extend_lens_cpu=(topk,) * bucket,
                draft_kv_slots=torch.full((bucket * topk, d + 1), pad_slot, dtype=slot_dtype,
                                          device=device),
                num_branches=topk,
            )
            static.attn_metadata = attn.plan_for_capture(static)
            step_batches.append(static)
        hidden_size = hidden.shape[-1]
        batch_index = torch.arange(bucket, device=device)[:, None]
        by_request = scratch.transpose(0, 1)  # [bucket, S, K], as draft_kv_slots takes it

        def loop() -> tuple[torch.Tensor, ...]:
            positions.copy_((seq_lens[None, :, None] + offsets).expand(depth, bucket, topk))
            slots = by_request.contiguous()  # one copy for every level (none at bucket 1)
            step = ops.grow_tree_step(probs, ids, None)
            tree_steps, parents = [step], [step.parent_branches]
            frontier = hidden_in[:, None, :].expand(bucket, topk, hidden_size)
            frontier = frontier.reshape(-1, hidden_size)
            for d, static in enumerate(step_batches):
                # the level's slots and tokens are read where they were computed (no copy
                # into the static batch: the backend reads draft_kv_slots in its forward)
                static.draft_kv_slots = ops.draft_kv_slots(slots, parents, d)
                out = draft.forward(static, attn, step.tokens.reshape(-1), frontier)  # [B*K, H]
                child_probs, child_ids = draft.topk(out, topk)  # [B * K, K]
                step = ops.grow_tree_step(child_probs, child_ids, step)
                tree_steps.append(step)
                parents.append(step.parent_branches)
                frontier = out.view(bucket, topk, hidden_size)[batch_index, step.parent_branches]
                frontier = frontier.reshape(-1, hidden_size)
            tree = ops.organize_draft_tree(tree_steps, shape.num_draft_tokens)
            verify = ops.build_verify_tree(roots, tree.tokens, tree.parents, seq_lens, mask_mode)
            layout = (verify.tokens, verify.positions, verify.retrieve_index,
                      verify.retrieve_next_token, verify.retrieve_next_sibling, verify.tree_mask)
            return tuple(t.contiguous() for t in layout)

        with capture.warmup():  # compiles kernels and settles lazy state off-graph
            warm = loop()
        graph = capture.new_graph()
        outputs = record_with_own_outputs(capture, graph, loop, warm)
        return cls(graph, attn, mask_mode, pad_slot, rows, seq_lens, scratch, probs, ids,
                   hidden_in, roots, step_batches, outputs)

    def replay(
        self,
        rows: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Sequence[int],
        scratch: torch.Tensor,
        probs: torch.Tensor,
        ids: torch.Tensor,
        hidden: torch.Tensor,
        roots: torch.Tensor,
    ) -> VerifyTree:
        """Refresh the inputs with a batch of B <= bucket requests (``scratch``
        ``[B, >= S * K]`` in the worker's order: depth-major, then branch), then every
        level's metadata, and replay. The tree's tokens and positions are copies; its other
        tensors are views of the outputs, rewritten by the next replay."""
        size = len(seq_lens_cpu)
        levels, topk = self.scratch.shape[0], self.scratch.shape[2]
        self.rows[:size].copy_(rows)
        self.seq_lens[:size].copy_(seq_lens)
        self.scratch[:, :size].copy_(scratch[:, : levels * topk].view(size, levels, topk)
                                     .transpose(0, 1))
        self.probs[:size].copy_(probs)
        self.ids[:size].copy_(ids)
        self.hidden[:size].copy_(hidden)
        self.roots[:size].copy_(roots)
        if self.filled > size:  # a larger batch left real rows and slots behind
            for tensor in (self.rows, self.seq_lens, self.probs, self.ids, self.hidden,
                           self.roots):
                tensor[size:].zero_()
            self.scratch[:, size:].fill_(self.pad_slot)
        self.filled = size
        return replay_draft_loop(self.graph, self.attn, self.steps, self.rows.shape[0],
                                 seq_lens_cpu, self.outputs, self.mask_mode)
