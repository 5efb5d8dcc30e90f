"""Early-exit self-drafting: the target's first L layers, its final norm and its lm_head.

A model with no trained head still drafts from itself: the residual stream after layer
``L`` of ``num_layers``, through the final norm and the ``lm_head``, is a cheap guess of
the next token. The drafter shares everything with the target:

* its weights: the target's own modules (``LlamaForCausalLM.forward(num_layers=L)``);
* its KV: the committed positions' K/V of layers ``< L`` in the target's paged cache are
  exactly what the early exit attends over, so no draft cache exists at all. A proposal
  of ``S`` tokens runs ``S`` one-token forwards of the first ``L`` layers (the pending root
  at position ``seq_len``, then each drafted token at the next position), writing their
  layers' K/V into the slots the verify reserves for the same positions; the verify then
  overwrites every layer there, and the accept frees what it rejects.

The proposal is a chain (each step's argmax), whatever the shape's top-K: a top-K tree
would need tree attention in the drafting forwards, and the chain is what one exit can
rank. The drafting forwards run eagerly (no device graph; the verify still replays from
the target's graphs where it can). Lossless as every drafter is: the verify decides.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from eagle_hal.engine.request import Request
from eagle_hal.errors import InvalidArgument
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.speculative.draft_tracker import table_row
from eagle_hal.speculative.drafter import Proposal
from eagle_hal.validation import check_int

__all__ = ["SelfDrafter", "chain_proposals", "is_self_draft", "parse_self_draft"]


def is_self_draft(draft: Any) -> bool:
    """Whether a ``draft`` argument names the self-drafter (``"self:L"``)."""
    return isinstance(draft, str) and draft.partition(":")[0].strip().lower() == "self"


def parse_self_draft(name: str, text: str) -> int:
    """``"self:L"`` -> ``L`` (>= 1; that it is below the target's layer count is checked
    when the target is known, ``SelfDrafter.bind``). Raises ``InvalidArgument`` naming
    ``name`` (``"draft"``, ``"--draft"``)."""
    allowed = "'self:L' with L >= 1 the target's layers the draft runs (fewer than it has)"
    kind, colon, value = text.partition(":")
    value = value.strip()
    if kind.strip().lower() != "self" or not colon or not value.isdigit():
        raise InvalidArgument(name, text, allowed)
    try:
        return check_int(name, int(value), low=1)
    except InvalidArgument:
        raise InvalidArgument(name, text, allowed) from None


def chain_proposals(chains: Sequence[Sequence[int]]) -> list[Proposal]:
    """Each chain of drafted tokens as a proposal (node ``i + 1``'s parent is node ``i``)."""
    return [Proposal(tuple(c), tuple(range(len(c)))) for c in chains]


class SelfDrafter:
    """The early-exit ``Drafter`` over the first ``num_layers`` layers of the target (see
    the module docstring). Holds nothing per request."""

    on_device = True

    def __init__(self, num_layers: int) -> None:
        self.num_layers = check_int("num_layers", num_layers, low=1)
        self.runner: Any = None
        self.topk = 1  # a chain

    @property
    def name(self) -> str:
        return f"self:{self.num_layers}"

    def bind(self, runner: Any) -> None:
        """Draft through ``runner``'s target and KV. Raises ``InvalidArgument`` when the
        target has no layer beyond the first ``num_layers`` (the exit would be the target)."""
        layers = runner.target.config.num_layers
        if self.num_layers >= layers:
            raise InvalidArgument("draft", self.name,
                                  f"'self:L' with L in [1, {layers - 1}]: the target has "
                                  f"{layers} layers")
        if runner.parallel.world_size > 1:
            raise InvalidArgument("draft", self.name,
                                  "a single-process target (self-drafting does not run "
                                  "tensor-parallel)")
        self.runner = runner

    def propose_requests(self, requests: Sequence[Request], shape: TreeShape) -> list[Proposal]:
        steps = shape.num_steps
        if steps <= 0 or shape.num_draft_tokens <= 1 or not requests:
            return [Proposal() for _ in requests]
        steps = min(steps, shape.num_draft_tokens - 1)
        runner = self.runner
        rows = [table_row(r) for r in requests]
        seq_lens = [r.cached_len for r in requests]
        for row, seq_len in zip(rows, seq_lens, strict=True):
            runner.table.reserve(row, seq_len + steps)  # the verify's slots of the same positions
        runner.sync_table()
        tokens = runner.long([r.output_ids[-1] for r in requests])  # [B] the pending roots
        drafted = []
        for depth in range(steps):
            batch = runner.causal_batch(ForwardMode.DECODE, tokens, rows,
                                        [s + depth for s in seq_lens], [1] * len(requests))
            batch.attn_metadata = runner.target_attn.plan(batch)
            out = runner.target.forward(batch, runner.target_attn, num_layers=self.num_layers)
            tokens = runner.target.compute_logits(out.hidden_states).argmax(dim=-1)  # [B]
            drafted.append(tokens)
        return chain_proposals(torch.stack(drafted, dim=1).tolist())  # [B, S], one read-back

    def propose(self, request_ids: Sequence[int], tokens: Sequence[Sequence[int]],
                shape: TreeShape) -> list[Proposal]:
        raise TypeError("SelfDrafter proposes through propose_requests (it reads the KV)")

    def observe(self, request_id: int, emitted: Sequence[int]) -> None:
        pass

    def release(self, request_id: int) -> None:
        pass
