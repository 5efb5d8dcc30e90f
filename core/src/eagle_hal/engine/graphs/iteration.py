"""An overlapped speculative iteration's verify-to-next-state part as one device graph.

``speculative.speculative_overlap`` builds each iteration on the device from the previous one.
After the draft loop (its own graph), the iteration is: the target's verify forward, the
lm_head, the greedy accept, the move of the accepted path to the front of the verify block,
the draft extend's inputs (the emitted tokens padded with the bonus token, positions,
slots, the accepted nodes' features), the draft extend forward, the draft's top-K at each
request's last emitted token, and the packed results for the host. Eagerly that is about a
hundred host calls per iteration; ``VerifyExtendGraph`` records all of it into one graph
per ``(bucket, S, K, N, reserve, aux layers, tree-mask layout)``.

What the graph records is the algorithm's own code: the caller passes the body
(``VerifyExtendBody``; ``speculative.acceptance.greedy_accept_and_extend`` gives the
speculative iteration's), which reads the static inputs ``VerifyExtend`` gives it and runs
the two forwards over their static batches (``VerifyExtend.verify``, ``VerifyExtend.extend``).
Its static inputs are

    rows, seq_lens        [bucket]               table rows, cached lengths (the device's)
    slots                 [bucket, reserve]      slots of positions seq_len, seq_len + 1, ...
    tokens, positions     [bucket, N]            the verify tree (from the draft loop)
    next_token, next_sibling  [bucket, N]        its links
    tree_mask             tree-block [bucket, N, N] or bit-packed [bucket, N]

and its outputs (outside the shared pool, ``engine.graphs.forward.record_with_own_outputs``)
are the body's, for the speculative iteration

    packed     [bucket, 2 + W + N]  accept length, bonus token, accepted nodes, tree tokens
    seq_next   [bucket]             seq_lens + accept lengths
    bonus      [bucket]             the next roots
    probs, ids [bucket, K]          the draft's top-K after the extend
    hidden     [bucket, H]          its hidden state at the last emitted token

Two forwards share the graph (the attention backends must declare
``multi_forward_graphs``), each with its own static batch planned at capture and refreshed
before the replay in capture order. Their slot inputs are copies of ``slots`` made before
the replay (a plan may read them); the extend's tokens and positions are written inside the
graph, before its forward reads them. Padded rows hold row 0, length 0, token 0, no links,
a mask that sees only the node itself and the padding slot, so they read and write nothing
real (their accept is the root alone). Greedy acceptance only: sampling needs per-request
seeds and counters and stays eager.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from eagle_hal.engine.graphs.forward import record_with_own_outputs, replay_forwards
from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture
from eagle_hal.hal.sampling import NO_NODE, TreeShape, VerifyTree
from eagle_hal.hal.tree_mask import TreeMaskMode

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.speculative.drafting import DraftInputs

__all__ = ["ExtendForward", "VerifyExtend", "VerifyExtendBody", "VerifyExtendGraph"]

# (input ids [B, W], positions [B, W], features [B * W, H]) -> the draft extend's hidden
# states [B * W, H]
ExtendForward = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


class VerifyExtend(NamedTuple):
    """What a verify-accept-extend body reads inside the graph (see the module docstring)."""

    shape: TreeShape
    seq_lens: torch.Tensor  # [bucket] int64 cached lengths
    tokens: torch.Tensor  # [bucket, N] int64 the verify tree's tokens
    next_token: torch.Tensor  # [bucket, N] int64 its links
    next_sibling: torch.Tensor  # [bucket, N] int64
    verify_slots: torch.Tensor  # [bucket, N] the verify forward's K/V slots
    verify: Callable[[], Any]  # the target's verify forward: its ``ModelOutput``
    extend: ExtendForward  # the draft's extend forward over W = S + 1 tokens a request


# the algorithm's verify, accept and extend: the static inputs in, the outputs out
VerifyExtendBody = Callable[[VerifyExtend], tuple[torch.Tensor, ...]]


@dataclasses.dataclass
class VerifyExtendGraph:
    """One captured verify-accept-extend; see the module docstring."""

    graph: DeviceGraph
    forwards: tuple[tuple[AttentionBackend, ForwardBatch], ...]  # the verify, the extend
    pad_slot: int
    table_rows: torch.Tensor
    seq_lens: torch.Tensor
    slots: torch.Tensor
    tokens: torch.Tensor
    positions: torch.Tensor
    next_token: torch.Tensor
    next_sibling: torch.Tensor
    tree_mask: torch.Tensor
    pad_mask: torch.Tensor  # [N, N] or [N]: a padded row's mask
    verify_slots: torch.Tensor  # [bucket, N] the verify forward's out_cache_loc
    extend_slots: torch.Tensor  # [bucket, W] the extend forward's out_cache_loc
    outputs: tuple[torch.Tensor, ...]
    filled: int = 0

    @classmethod
    def capture(
        cls,
        capture: GraphCapture,
        runner: Any,
        body: VerifyExtendBody,
        *,
        bucket: int,
        shape: TreeShape,
        reserve: int,
        aux_layers: tuple[int, ...],
        pad_slot: int,
    ) -> VerifyExtendGraph:
        """Static inputs holding padding only, both forwards planned in capture order, a
        warm-up run of ``body``, then the recorded iteration. ``runner``: the
        ``ModelRunner`` whose target and draft run."""
        target, draft = runner.target, runner.draft
        target_attn, draft_attn = runner.target_attn, runner.draft_attn
        device, slot_dtype, mask_mode = runner.device, runner.slot_dtype, runner.tree_mask_mode
        nodes, width = shape.num_draft_tokens, shape.num_steps + 1
        long: dict[str, Any] = dict(dtype=torch.int64, device=device)
        table_rows, seq_lens = torch.zeros(bucket, **long), torch.zeros(bucket, **long)
        slots = torch.full((bucket, reserve), pad_slot, dtype=slot_dtype, device=device)
        tokens, positions = torch.zeros(bucket, nodes, **long), torch.zeros(bucket, nodes, **long)
        next_token = torch.full((bucket, nodes), NO_NODE, **long)
        next_sibling = torch.full((bucket, nodes), NO_NODE, **long)
        node = torch.arange(nodes, **long)
        if mask_mode == TreeMaskMode.BIT_PACKED:
            pad_mask = torch.ones_like(node) << node  # node i sees itself only
        else:
            pad_mask = torch.eye(nodes, dtype=torch.bool, device=device)
        tree_mask = pad_mask.expand(bucket, *pad_mask.shape).contiguous()
        verify_slots = torch.full((bucket, nodes), pad_slot, dtype=slot_dtype, device=device)
        extend_slots = torch.full((bucket, width), pad_slot, dtype=slot_dtype, device=device)
        extend_ids, extend_positions = (torch.zeros(bucket, width, **long) for _ in range(2))
        verify = ForwardBatch(
            mode=ForwardMode.TARGET_VERIFY, input_ids=tokens.view(-1),
            positions=positions.view(-1), table_rows=table_rows, prefix_lens=seq_lens,
            extend_lens=torch.full((bucket,), nodes, **long), out_cache_loc=verify_slots.view(-1),
            prefix_lens_cpu=(0,) * bucket, extend_lens_cpu=(nodes,) * bucket,
            tree_mask=tree_mask, num_branches=1,
        )
        extend = ForwardBatch(
            mode=ForwardMode.DRAFT_EXTEND, input_ids=extend_ids.view(-1),
            positions=extend_positions.view(-1), table_rows=table_rows, prefix_lens=seq_lens,
            extend_lens=torch.full((bucket,), width, **long),
            out_cache_loc=extend_slots.view(-1), prefix_lens_cpu=(0,) * bucket,
            extend_lens_cpu=(width,) * bucket,
        )
        verify.attn_metadata = target_attn.plan_for_capture(verify)
        extend.attn_metadata = draft_attn.plan_for_capture(extend)
        def run_extend(ids: torch.Tensor, at: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
            extend_ids.copy_(ids)  # the static batch's inputs, written inside the graph
            extend_positions.copy_(at)
            return draft.forward(extend, draft_attn, extend.input_ids, features)

        def run_verify() -> Any:
            return target.forward(verify, target_attn, aux_layers=aux_layers)

        statics = VerifyExtend(shape, seq_lens, tokens, next_token, next_sibling, verify_slots,
                               run_verify, run_extend)

        def iteration() -> tuple[torch.Tensor, ...]:
            return body(statics)

        with capture.warmup():  # compiles kernels and settles lazy state off-graph
            warm = iteration()
        graph = capture.new_graph()
        outputs = record_with_own_outputs(capture, graph, iteration, warm)
        return cls(graph, ((target_attn, verify), (draft_attn, extend)), pad_slot, table_rows,
                   seq_lens, slots, tokens, positions, next_token, next_sibling, tree_mask,
                   pad_mask, verify_slots, extend_slots, outputs)

    def replay(self, inputs: DraftInputs, tree: VerifyTree) -> tuple[torch.Tensor, ...]:
        """Refresh the inputs with a batch of B <= bucket requests (``inputs``: the draft
        loop's, whose ``seq_lens`` are upper bounds of the lengths, the host lengths the
        plans see, and whose ``scratch`` ``[B, >= reserve]`` holds the slots of positions
        ``seq_len ..``; ``tree``: the draft loop's verify tree), then both forwards'
        metadata in capture order, and replay. Returns the outputs' first B rows, copied
        (the next replay rewrites the graph's)."""
        bounds, slots = inputs.seq_lens, inputs.scratch
        size = len(bounds)
        nodes, width = self.tokens.shape[1], self.extend_slots.shape[1]
        self.table_rows[:size].copy_(inputs.table_rows_device)
        self.seq_lens[:size].copy_(inputs.seq_lens_device)
        self.slots[:size].copy_(slots[:, : self.slots.shape[1]])
        self.verify_slots[:size].copy_(slots[:, :nodes])
        self.extend_slots[:size].copy_(slots[:, :width])
        self.tokens[:size].copy_(tree.tokens)
        self.positions[:size].copy_(tree.positions)
        self.next_token[:size].copy_(tree.retrieve_next_token)
        self.next_sibling[:size].copy_(tree.retrieve_next_sibling)
        self.tree_mask[:size].copy_(tree.tree_mask.reshape(self.tree_mask[:size].shape))
        if self.filled > size:  # a larger batch left real rows and slots behind
            for tensor in (self.table_rows, self.seq_lens, self.tokens, self.positions):
                tensor[size:].zero_()
            for tensor in (self.next_token, self.next_sibling):
                tensor[size:].fill_(NO_NODE)
            for tensor in (self.slots, self.verify_slots, self.extend_slots):
                tensor[size:].fill_(self.pad_slot)
            self.tree_mask[size:].copy_(self.pad_mask.expand_as(self.tree_mask[size:]))
        self.filled = size
        replay_forwards(self.graph, self.forwards,
                        tuple(bounds) + (0,) * (self.table_rows.shape[0] - size))
        return tuple(out[:size].clone() for out in self.outputs)
