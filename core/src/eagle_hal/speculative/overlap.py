"""Plain decoding with the host's work hidden behind the device's: one iteration in flight.

A plain decode iteration is a device forward (a graph replay) then host work: read back the
sampled tokens, append them, detokenise, check stops, schedule the next batch. Done in
that order the device idles while the host works. Here each call launches the next
iteration *before* reading back the previous one: the next iteration's root tokens are the
previous iteration's sampled tokens, still on the device, so the launch needs nothing from
the host but positions and slots, which plain decoding knows in advance (every iteration
emits exactly one token per request). The engine then receives each iteration's tokens one
call late, while the following iteration runs.

What this changes and what it does not:

* the tokens are those of ordinary plain decoding (same inputs, same per-position sampling
  noise), except that a request which finishes (EOS, stop string, length) rides along in
  one more iteration: its token is dropped and its KV write lands in slots the scheduler
  already freed, ordered on the device before any later use of them. The other rows of
  that iteration run in a batch one larger, so kernels whose summation order depends on
  the batch shape (the attention's split count) may round them differently: bit-equal
  in float32 in the tests, a possible flip of a near-tie in 16-bit;
* a request that joins the batch gets no token from the call that first launches it (the
  engine then counts no verify pass for it);
* a request preempted or re-prefilled while in flight is recognised (its cached length no
  longer matches the launch's) and its in-flight token dropped: the next iteration
  recomputes it from the host's tokens;
* the scheduler grows KV from the cached length, one position ahead of what the host has
  read: where that would preempt or reject, the engine first drains the iteration in
  flight (``drain``), so a request that fits without overlap fits with it.

``OverlappedPlain`` holds the iteration in flight (``InFlight``). It serves plain decoding
and the adaptive mode's iterations at S = 0, where the draft is idle: an iteration's tokens and
features then go to the catch-up log (``speculative.catchup``) when it is read back, so an
iteration dropped in flight (the controller turning speculation back on discards it) was
never logged, and its position is recomputed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.speculative.acceptance import accept_tree
from eagle_hal.speculative.draft_tracker import table_row
from eagle_hal.speculative.drafting import single_node_tree
from eagle_hal.speculative.iteration import DecodeBatch, IterationContext, Outputs

__all__ = ["InFlight", "OverlappedPlain"]


@dataclasses.dataclass(slots=True)
class InFlight:
    """A plain iteration launched but not read back."""

    requests: list[Request]
    # per request: its cached length and output count when this iteration is read back
    # (a re-prefill resets the length: the token is then stale)
    expected: list[tuple[int, int]]
    tokens: torch.Tensor  # [B] int64 on the device: each request's sampled token
    host: torch.Tensor  # [B] int64 host copy, filled when ``ready`` has passed
    ready: torch.Event | None  # None on the CPU (the copy is synchronous)
    # with a draft idle at S = 0: each request's cached length before the iteration and
    # the target's projected features [B, H], for the catch-up log once read back
    draft_lens: list[int] | None = None
    features: torch.Tensor | None = None

    def source_of(self, requests: Sequence[Request]) -> list[int | None]:
        """For each request, its row in this iteration, or ``None`` when it has no valid
        token here (not launched in it, finished, preempted or re-prefilled since)."""
        index = {id(r): b for b, r in enumerate(self.requests)}
        sources: list[int | None] = []
        for request in requests:
            b = index.get(id(request))
            valid = (
                b is not None and request.table_row is not None and not request.finished
                and request.cached_len == self.expected[b][0]
            )
            if valid and len(request.output_ids) != self.expected[b][1]:  # type: ignore[index]
                raise RuntimeError(
                    f"request {request.request_id}: {len(request.output_ids)} output tokens "
                    f"but the iteration in flight expects {self.expected[b][1]}"
                )
            sources.append(b if valid else None)
        return sources

    def read(self) -> list[int]:
        """The sampled tokens, waiting for the iteration to finish."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.host.tolist()


class OverlappedPlain:
    """Plain decoding with one iteration in flight (see the module docstring)."""

    def __init__(self, context: IterationContext) -> None:
        self.context = context
        self.in_flight: InFlight | None = None

    def discard(self) -> None:
        """Forget the iteration in flight (before a decode that does not overlap): its valid
        requests give back the position it advanced, so their next iteration recomputes it."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is None:
            return
        table = self.context.runner.table
        sources = in_flight.source_of(in_flight.requests)
        for request, source in zip(in_flight.requests, sources, strict=True):
            if source is not None:
                request.cached_len -= 1
                table.truncate(request.table_row, request.cached_len)

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Read back the iteration in flight now, without launching another: each of its
        requests still running with its token (logged for the draft's catch-up as usual)."""
        in_flight, self.in_flight = self.in_flight, None
        if in_flight is None:
            return []
        sources = in_flight.source_of(in_flight.requests)
        if all(s is None for s in sources):
            return []
        values = in_flight.read()
        if in_flight.features is not None:
            self._record_for_catch_up(in_flight, in_flight.requests, sources, values)
        return [(r, [values[s]]) for r, s in zip(in_flight.requests, sources, strict=True)
                if s is not None]

    def decode(self, batch: DecodeBatch) -> Outputs:
        """One plain decode iteration for the batch, launched before the previous one is
        read back; returns the previous iteration's tokens for the requests it holds
        (``[]`` for the others)."""
        context = self.context
        runner, ops, requests, size = context.runner, context.ops, batch.requests, batch.size
        previous = self.in_flight
        table_rows = [table_row(r) for r in requests]
        seq_lens = [r.cached_len for r in requests]
        for row, seq_len in zip(table_rows, seq_lens, strict=True):
            runner.table.reserve(row, seq_len + 1)
        sources = previous.source_of(requests) if previous is not None else [None] * size
        carried = [s is not None for s in sources]
        # a request's root is the previous iteration's token when it has one there, else
        # the host's last token (just prefilled, or its in-flight token was dropped)
        host_roots = [0 if c else r.output_ids[-1] for r, c in zip(requests, carried, strict=True)]
        (table_rows_device, seq_lens_device, roots_device, slots_device, nodes_device,
         rows_in_previous, carried_device) = (
            runner.upload_with_table(
                table_rows, seq_lens, host_roots, runner.host_slots(table_rows, seq_lens, 1),
                [1] * size, [s if s is not None else 0 for s in sources],
                [int(c) for c in carried],
            )
        )  # [B] each
        # the sampling tensors before the launch: building them copies to the device,
        # which must not wait behind the forward
        sampling = context.sampling.of(requests)
        if previous is not None and sources == list(range(len(previous.requests))):
            roots = previous.tokens  # the same batch in the same order: the usual case
        elif previous is not None and any(carried):
            roots = torch.where(carried_device.bool(), previous.tokens[rows_in_previous],
                                roots_device)
        else:
            roots = roots_device
        tree = single_node_tree(roots, seq_lens_device, runner.tree_mask_mode, context.one_node)
        forward = runner.make_batch(
            ForwardMode.DECODE, input_ids=tree.tokens, positions=tree.positions,
            table_rows=table_rows,
            prefix_lens=seq_lens, extend_lens=[1] * size, out_cache_loc=slots_device,
            device_lens=(table_rows_device, seq_lens_device, nodes_device),
        )
        out = runner.run_target(forward, context.aux_layers)
        logits = runner.target.compute_logits(out.hidden_states).view(size, 1, -1)
        if sampling.greedy:
            tokens = ops.masked_argmax(logits, context.vocab_size)[:, 0].long()
        else:
            result = accept_tree(
                ops, logits, context.vocab_size, tree.tokens, tree.retrieve_next_token,
                tree.retrieve_next_sibling, 0, sampling, 2 * seq_lens_device,
            )
            tokens = result.bonus_tokens.long().view(size)
        on_device = runner.asynchronous
        host = torch.empty(size, dtype=torch.int64, pin_memory=on_device)
        host.copy_(tokens, non_blocking=on_device)
        ready = None
        if on_device:
            ready = torch.Event(device=runner.device)
            ready.record()
        for request, seq_len in zip(requests, seq_lens, strict=True):
            request.cached_len = seq_len + 1
        # by the time this iteration is read back, the engine holds the previous one's tokens
        expected = [(r.cached_len, len(r.output_ids) + c)
                    for r, c in zip(requests, carried, strict=True)]
        features = runner.draft.project_target_features(out) if context.draft.enabled else None
        self.in_flight = InFlight(list(requests), expected, tokens, host, ready, seq_lens,
                                  features)
        context.iterations_at_depth[0] += 1
        # the previous iteration has run meanwhile (it was queued before this one)
        if previous is None or not any(carried):
            return Outputs([[] for _ in requests])
        values = previous.read()
        if previous.features is not None:
            self._record_for_catch_up(previous, requests, sources, values)
        emitted = [[values[s]] if s is not None else [] for s in sources]
        # a call that only launched reports nothing
        accept = 1.0 if context.controller is not None and any(emitted) else None
        return Outputs(emitted, accept)

    def _record_for_catch_up(self, previous: InFlight, requests: Sequence[Request],
                             sources: list[int | None], values: list[int]) -> None:
        """Log the read-back iteration's tokens and features for the draft
        (``speculative.catchup``), as an eager iteration at S = 0 logs its own."""
        assert previous.features is not None and previous.draft_lens is not None
        taken = [(r.request_id, s) for r, s in zip(requests, sources, strict=True)
                 if s is not None]
        kept = [s for _, s in taken]
        features = previous.features
        if kept != list(range(features.shape[0])):
            index = torch.tensor(kept, dtype=torch.int64)
            if self.context.runner.asynchronous:  # pinned: a pageable copy waits for the device
                index = index.pin_memory()
            index = index.to(features.device, non_blocking=True)
            features = features.index_select(0, index)  # [B', H]
        self.context.draft.pending.add(
            [rid for rid, _ in taken], [previous.draft_lens[s] for s in kept],
            [values[s] for s in kept], features,
        )
