"""The draft model kept in step with the target, request by request.

After every iteration the draft must have consumed each request's emitted tokens (fed the
target's features of the positions before them): its top-K and hidden state at the last
token are where the next iteration's tree grows from. ``DraftTracker`` holds that state
per request (``DraftStates``), runs the draft extend that advances it, and, while the
adaptive controller has speculation off (S = 0) and the draft idles, logs what the draft
missed (``speculative.catchup``) so that the next iteration with S > 0 first catches it up
with one ragged extend.

Positions: the draft reads token ``p + 1`` with the target's feature at ``p``, so after a
request's extend the draft's cached length is the request's.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.engine.runner import ModelRunner
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.speculative.catchup import CatchUpTotals, PendingDraftInputs
from eagle_hal.speculative.drafting import DraftState, DraftStates

__all__ = ["DraftTracker", "table_row"]


def table_row(request: Request) -> int:
    """The request's row of the KV token table (it holds one while it runs)."""
    if request.table_row is None:
        raise RuntimeError(f"request {request.request_id} holds no KV row")
    return request.table_row


class DraftTracker:
    """Each running request's draft state, the log of what the draft has not seen yet, and
    the draft extend that advances them. ``enabled`` is false without a draft model (or
    with one that is never asked to speculate): then nothing is kept and nothing runs."""

    def __init__(self, runner: ModelRunner, enabled: bool, topk: int = 1) -> None:
        self.runner = runner
        self.topk = topk  # K of the settings in use: the top-K the next tree grows from
        self.enabled = enabled
        self.states = DraftStates()  # what the last draft extend left for each request
        self.pending = PendingDraftInputs()  # what the draft missed while S = 0
        self.catch_ups = CatchUpTotals()  # catch-ups run and the tokens they extended over

    def states_of(self, requests: Sequence[Request]) -> DraftState:
        """The requests' draft states as the last draft extend left them, stacked ``[B, ...]``."""
        return self.states.stacked([r.request_id for r in requests])

    def forget(self, request: Request) -> None:
        """Drop a request's state and its pending tokens (finished, preempted, re-prefilled)."""
        self.states.drop(request.request_id)
        self.pending.drop(request.request_id)

    def extend(
        self,
        requests: Sequence[Request],
        input_ids: Sequence[int],
        features: torch.Tensor,
        prefix_lens: Sequence[int],
        extend_lens: Sequence[int],
        *,
        prefill: bool = False,
    ) -> None:
        """Run the draft over new tokens (``extend_lens[b]`` of request b past its
        ``prefix_lens[b]``, fed ``features [T, H]``) and keep each request's top-K and
        hidden state at its last token. ``prefill``: lengths that vary from call to call
        (prompts, catch-ups), which replay from a token bucket's graph, never one of their
        own length (``ModelRunner.run_draft``)."""
        runner = self.runner
        table_rows = [table_row(r) for r in requests]
        batch = runner.causal_batch(ForwardMode.DRAFT_EXTEND, input_ids, table_rows, prefix_lens,
                                    extend_lens)
        hidden_out = runner.run_draft(batch, features.to(runner.dtype), prefill=prefill)  # [T, H]
        if all(n == extend_lens[0] for n in extend_lens):
            last_hidden = hidden_out.view(len(table_rows), extend_lens[0], -1)[:, -1]  # [B, H]
        else:
            last_hidden = hidden_out[torch.cumsum(batch.extend_lens, 0) - 1]
        probs, ids = runner.draft.topk(last_hidden, self.topk)  # [B, K]
        self.states.store([r.request_id for r in requests], DraftState(probs, ids, last_hidden))

    def catch_up(self, requests: Sequence[Request]) -> bool:
        """Bring the draft of every lagging request in ``requests`` up to its cached length
        with one ragged draft extend over the pending tokens; returns whether any lagged.
        Their KV positions are below the cached lengths, hence already reserved."""
        pending = self.pending.take([r.request_id for r in requests])
        if pending is None:
            return False
        by_id = {r.request_id: r for r in requests}
        lagging = [by_id[i] for i in pending.request_ids]
        for request, start, count in zip(lagging, pending.draft_lens, pending.extend_lens,
                                         strict=True):
            if start + count != request.cached_len:
                raise RuntimeError(
                    f"request {request.request_id}: the draft lags from {start} by {count} "
                    f"tokens but the target holds {request.cached_len}"
                )
        self.catch_ups.record(len(pending.input_ids))
        # the lengths depend on the stretch at S = 0: a graph per length would not pay, so
        # a token bucket's graph (GraphRunner.prefill_bucket), else eager
        self.extend(lagging, pending.input_ids, pending.features, pending.draft_lens,
                    pending.extend_lens, prefill=True)
        return True

    def lags(self, requests: Sequence[Request]) -> bool:
        """Whether any of ``requests`` has tokens the draft has not seen."""
        return any(r.request_id in self.pending for r in requests)
