"""Speculative decoding with one iteration in flight: the device chains iterations itself.

An EAGLE iteration ends with the host reading back how far each request advanced (the
accept lengths, the bonus token, the accepted path) and building the next iteration from
it: positions, slots, the draft extend's tokens. Done in that order, the device idles
while the host works, and at batch size 1 on a small model that is most of the time
(``benchmarks/profile_decode.py``). Here the next iteration is built on the device from
the previous one's results, which are still there, and launched *before* the previous one
is read back; the host reads each iteration one call late, while the next one runs.

What the device carries from one iteration to the next, per request:

* its cached length ``seq`` (the previous ``seq`` plus its accept length) and its root
  token (the previous bonus token);
* the draft's state after the previous draft extend (top-K and hidden state).

The iteration itself is the eager one (``speculative.eager``) with every host list
replaced by device tensors:

* slots: the reserved block's slots are gathered from the device table at ``seq + i``.
  The host reserves, per request, ``reserve`` positions past the largest length the
  request can have reached (its read-back length plus ``S + 1``);
* draft and verify: their host lengths (``prefix_lens_cpu``) are these upper bounds. So
  the attention backend must read prefix lengths from the device only
  (``AttentionBackend.lengths_read_in_forward``);
* accept, then the accepted path moved to the front of the verify block
  (``SamplingOps.compact_accepted``; a chain's path is always in place);
* draft extend with a fixed shape: ``S + 1`` tokens per request, the emitted tokens then
  copies of the bonus token. The padding positions lie past the new cached length; they
  are written (draft KV) but never read before the next iteration writes them again. The
  draft's new hidden state is the one at the last emitted token.

The tokens are those of the iteration without overlap (same inputs, same arithmetic on
the same shapes, except the draft extend's padding, which causal attention keeps from
the real tokens). Bit-equal in float32 (the tests); in 16-bit the draft extend's
fixed width can change a kernel's split or tile choice and so round the draft's hidden
state differently, which may change a drafted token at a near-tie: the accept length,
and, through the verify's 16-bit rounding over another tree, possibly a near-tie of the
target's as well, as speculative against plain decoding in 16-bit may anyway.

An iteration is continued while the batch keeps at least one of its requests and every
request it lost finished (``speculative.overlap_rows``): the rows of those still running start
from its results on the device, and a request that joined since (after its prefill) from
the host's state, in the same launch; the call returns ``[]`` for it. When one is
preempted or re-prefilled, the iteration in flight is applied to the requests still
running unchanged (``finish``; the preempted or re-prefilled request's part is
recomputed), and the call after it starts a new chain; the engine's ``drain`` applies it.

When the next call asks for something the iteration in flight cannot continue into
(another depth or tree shape, the split pass's timed iterations, plain decoding, another
batch), it is read back and applied instead (``finish``), for the requests still running
in the new batch: its tokens are that call's, nothing launched for them is lost, and the
call after it starts a new chain. That is how the adaptive mode switches
depth: its S > 0 iterations run here as well, each observed by the controller when it is
read back, with the call's wall time (one iteration's period once the chain runs); the
draft's catch-up after a stretch at S = 0 runs before a chain's first launch and is
charged to the first observation after it.

Eligible: a depth S > 0, not timed (the split pass), one process, graph-capturable
tree-mask layouts (not ``FULL``), and attention backends that read lengths from the
device. Elsewhere, and where the KV cache cannot hold the overlap's extra reservation,
the iteration runs eagerly (``speculative.eager``).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.speculative.acceptance import (
    SamplingBatch,
    accept_and_extend,
    accept_tree,
    greedy_accept_and_extend,
)
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.draft_tracker import table_row
from eagle_hal.speculative.drafting import DraftInputs, DraftState, draft_tree
from eagle_hal.speculative.eager import EagerIteration
from eagle_hal.speculative.iteration import DecodeBatch, IterationContext, Outputs
from eagle_hal.speculative.overlap_rows import JOINED, DeviceRows, fits, start_inputs
from eagle_hal.speculative.overlap_rows import reserve as reserve_rows

__all__ = ["OverlappedSpeculative", "SpecInFlight"]


@dataclasses.dataclass(slots=True)
class SpecInFlight:
    """A speculative iteration launched but not read back."""

    requests: list[Request]
    steps: int
    spec: SpecConfig  # the settings at ``steps`` it ran with (K and N with S)
    reserve: int  # positions reserved past each request's launch length
    # each request's cached length when this iteration launched, as the host will know it
    # once the iteration before it is read back (its launch length on the device)
    expected: list[int]
    host: torch.Tensor  # [B, 2 + W + N] host copy of the packed results (pinned)
    ready: torch.Event | None  # None on the CPU (the copy is synchronous)
    width: int  # W: the accepted path's width (S + 1)
    # what the next iteration starts from, on the device
    seq_next: torch.Tensor  # [B] int64 cached lengths after this iteration
    roots_next: torch.Tensor  # [B] int64 bonus tokens: the next roots
    state_next: DraftState  # the draft's state after this iteration's extend

    def carries(self, requests: Sequence[Request], spec: SpecConfig) -> bool:
        """Whether the next iteration of ``requests`` with settings ``spec`` can start
        from this one (``rows_of``)."""
        return self.rows_of(requests, spec) is not None

    def rows_of(self, requests: Sequence[Request], spec: SpecConfig) -> list[int] | None:
        """This iteration's row of each of ``requests`` (``JOINED`` for one that joined the
        batch since) where the next iteration of them with settings ``spec`` can start
        from it: the same depth and tree shape, at least one request carried, none of them
        preempted or re-prefilled since it launched, and every request of this iteration
        left out finished (at batch 64 one finishes, and another joins, every few
        iterations; a new chain each time idled the device while the host built it).
        ``None`` where it cannot."""
        if spec != self.spec:
            return None
        where = {id(r): row for row, r in enumerate(self.requests)}
        rows_in_flight: list[int] = []
        for request in requests:
            row = where.pop(id(request), JOINED)
            if request.table_row is None or request.finished or (
                row != JOINED and request.cached_len != self.expected[row]
            ):
                return None
            rows_in_flight.append(row)
        if all(row == JOINED for row in rows_in_flight) or any(
            not self.requests[row].finished for row in where.values()
        ):
            return None
        return rows_in_flight

    def read(self) -> list[list[int]]:
        """The packed results, waiting for the iteration to finish."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.host.tolist()


class OverlappedSpeculative:
    """Speculative decoding with one iteration in flight (see the module docstring).
    ``eager`` runs the calls whose extra reservation the KV cache cannot hold."""

    def __init__(self, context: IterationContext, eager: EagerIteration) -> None:
        self.context = context
        self.eager = eager
        self.in_flight: SpecInFlight | None = None

    def eligible(self, steps: int) -> bool:
        """Whether an iteration at depth ``steps`` can be launched before the previous one
        is read back (see the module docstring; the caller rules out timed passes and
        several processes)."""
        context = self.context
        runner = context.runner
        if steps == 0 or not context.draft.enabled \
                or runner.tree_mask_mode == TreeMaskMode.FULL \
                or context.spec_at(steps).draft_tokens < steps + 1:  # the path must fit
            return False
        attns = (runner.target_attn, runner.draft_attn)
        return all(a is not None and a.lengths_read_in_forward for a in attns)

    def continues(self, batch: DecodeBatch) -> bool:
        """Whether the iteration in flight can be continued by ``batch``."""
        return self.in_flight is not None and self.in_flight.carries(batch.requests, batch.spec)

    def discard(self) -> None:
        """Drop the speculative iteration in flight: the host keeps the state it read back
        last, and each request still running gives back the positions reserved for it."""
        flight, self.in_flight = self.in_flight, None
        if flight is None:
            return
        self.context.reports.drop_chain()  # its chain will not be reported
        table = self.context.runner.table
        for request in reversed(flight.requests):
            row = request.table_row
            if row is not None and not request.finished and table.length(row) > request.cached_len:
                table.truncate(row, request.cached_len)

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Apply the iteration in flight (``finish``), not drop it: dropped, a chain the
        engine drains before every step for want of KV pages would never advance."""
        flight = self.in_flight
        if flight is None:
            return []
        requests = list(flight.requests)
        finished = self.finish(requests)
        if finished is None:
            return []
        self.context.reports.read_back(finished)
        return [(r, tokens) for r, tokens in zip(requests, finished, strict=True) if tokens]

    def finish(self, requests: Sequence[Request]) -> list[list[int]] | None:
        """Read back the iteration in flight and apply it, launching nothing, for those of
        its requests that are still running unchanged and in ``requests`` (the call
        switches depth, shape or mode, or the batch changed): each request's emitted
        tokens (``[]`` for one not in flight). The others give back their reserved
        positions, as ``discard`` does. ``None`` (nothing applied) when none qualifies or
        none is in flight."""
        flight = self.in_flight
        if flight is None:
            return None
        wanted = {id(r) for r in requests}
        keep = [
            id(r) in wanted and r.table_row is not None and not r.finished and r.cached_len == e
            for r, e in zip(flight.requests, flight.expected, strict=True)
        ]
        if not any(keep):
            self.discard()
            return None
        self.in_flight = None
        table = self.context.runner.table
        for request, kept in zip(reversed(flight.requests), reversed(keep), strict=True):
            row = request.table_row
            if not kept and row is not None and not request.finished:
                if table.length(row) > request.cached_len:
                    table.truncate(row, request.cached_len)
        emitted = self._apply(flight, 0, keep)
        by_request = {id(r): e for r, e, k in zip(flight.requests, emitted, keep, strict=True)
                      if k}
        return [by_request.get(id(r), []) for r in requests]

    def decode(self, batch: DecodeBatch) -> Outputs:
        """One speculative iteration at the batch's depth, launched before the previous one
        is read back; returns the previous iteration's emitted tokens (``[]`` for a request
        that starts a new chain: all of them, or one that joined). Where the KV cache or
        the context cannot hold the extra reservation, the iteration runs eagerly."""
        context = self.context
        runner, requests, steps, spec = context.runner, batch.requests, batch.steps, batch.spec
        flight = self.in_flight
        rows_in_flight = flight.rows_of(requests, spec) if flight is not None else None
        carried = rows_in_flight is not None
        if flight is not None and not carried:
            self.discard()
            flight = None
        num_nodes, topk = spec.draft_tokens, spec.topk
        width = steps + 1  # the longest accepted path: the root and S drafts
        reserve = max(num_nodes, steps * topk, width)
        table_rows = [table_row(r) for r in requests]
        joined = [not carried or rows_in_flight[i] == JOINED for i in range(len(requests))]
        # the most each request can have advanced on the device: the iteration in flight
        # may accept up to S drafts and its bonus
        bounds = [r.cached_len + (0 if j else width) for r, j in zip(requests, joined, strict=True)]
        # a chain starts only where its next, carried launch will fit too: otherwise the
        # calls would alternate between launching a chain and dropping it (carried, the
        # bounds already are those lengths)
        needed = [b + (width if j else 0) + reserve for b, j in zip(bounds, joined, strict=True)]
        if not fits(runner.table, table_rows, needed) or not reserve_rows(
            runner.table, table_rows, [b + reserve for b in bounds]
        ):
            self.discard()
            return self.eager.decode(batch)
        if any(joined):  # the draft first consumes what it missed at S = 0 (adaptive mode)
            self._catch_up_timed([r for r, j in zip(requests, joined, strict=True) if j])
        sampling = context.sampling.of(requests)  # built before the launch: it copies
        device, state = start_inputs(
            runner, context.draft, flight, requests, rows_in_flight,
            (table_rows, num_nodes, topk, width),
        )
        launch = self._launch(batch, table_rows, bounds, reserve, width, sampling, device, state)
        self.in_flight = launch
        context.iterations_at_depth[steps] += 1
        if not carried:
            launch.expected = [r.cached_len for r in requests]
            return Outputs([[] for _ in requests])
        assert flight is not None and rows_in_flight is not None
        kept = [False] * len(flight.requests)
        for row in rows_in_flight:
            if row != JOINED:
                kept[row] = True
        applied = self._apply(flight, reserve, kept)
        launch.expected = [r.cached_len for r in requests]
        emitted = [[] if row == JOINED else applied[row] for row in rows_in_flight]
        if context.controller is None or not any(emitted):
            return Outputs(emitted)
        # per request read back (one that joined returns nothing yet)
        accepted = sum(map(len, emitted)) / sum(1 for e in emitted if e)
        return Outputs(emitted, accepted, context.reports.overlapped_catch_up())

    def _catch_up_timed(self, requests: Sequence[Request]) -> None:
        """The draft's catch-up before a chain's first launch; in the adaptive mode its
        wall time is kept for the controller's next observation (the chain's first
        iteration read back), which charges it to the probe."""
        context = self.context
        if context.controller is None or not context.draft.lags(requests):
            context.draft.catch_up(requests)  # nothing to time: no device sync for it
            return
        synchronize = context.runner.backend.synchronize
        synchronize()
        start = time.perf_counter()
        if context.draft.catch_up(requests):
            synchronize()
            context.reports.chain_catch_up(time.perf_counter() - start)

    def _launch(
        self,
        batch: DecodeBatch,
        table_rows: list[int],
        bounds: list[int],
        reserve: int,
        width: int,
        sampling: SamplingBatch,
        device: DeviceRows,
        state: DraftState,
    ) -> SpecInFlight:
        """Queue the iteration: draft, verify, accept, move the path, draft extend."""
        context = self.context
        runner, ops, steps, spec = context.runner, context.ops, batch.steps, batch.spec
        num_nodes, topk, size = spec.draft_tokens, spec.topk, batch.size
        offsets = torch.arange(reserve, device=runner.device)
        slots = runner.slots_at(device.table_rows[:, None], device.seq_lens[:, None] + offsets)
        positions = (
            device.seq_lens.view(1, -1, 1) + offsets[: max(steps - 1, 0)].view(-1, 1, 1)
        ).expand(-1, -1, topk).reshape(max(steps - 1, 0), size * topk)  # [S - 1, B * K]

        # 1-2. draft; host lengths are upper bounds (the attention reads the device's)
        inputs = DraftInputs(table_rows, bounds, device.table_rows, device.seq_lens,
                             device.branches, slots, positions, device.roots, state)
        shape = TreeShape(steps, topk, num_nodes)
        tree = draft_tree(runner, ops, shape, inputs)
        graphs = runner.graphs
        if sampling.greedy and graphs is not None and graphs.can_replay_iteration(shape, inputs):
            replayed = graphs.replay_iteration(  # 3-5 as one graph
                shape, reserve, context.aux_layers, inputs, tree,
                greedy_accept_and_extend(runner, ops, context.vocab_size),
            )
            return self._in_flight(batch, reserve, width, replayed)
        # 3. verify
        verify_slots = slots[:, :num_nodes]
        forward = runner.make_batch(
            ForwardMode.TARGET_VERIFY, input_ids=tree.tokens, positions=tree.positions,
            table_rows=table_rows, prefix_lens=bounds, extend_lens=[num_nodes] * size,
            out_cache_loc=verify_slots, tree_mask=tree.tree_mask,
            device_lens=(device.table_rows, device.seq_lens, device.num_nodes),
        )
        out = runner.run_target(forward, context.aux_layers)
        logits = runner.target.compute_logits(out.hidden_states).view(size, num_nodes, -1)
        # 4. accept, then 5. move the path and extend the draft (as the graph does)
        result = accept_tree(
            ops, logits, context.vocab_size, tree.tokens, tree.retrieve_next_token,
            tree.retrieve_next_sibling, steps, sampling,
            device.seq_lens if sampling.greedy else 2 * device.seq_lens,
        )

        def run_extend(ids: torch.Tensor, at: torch.Tensor, features: torch.Tensor) -> torch.Tensor:
            extend = runner.make_batch(
                ForwardMode.DRAFT_EXTEND, input_ids=ids, positions=at, table_rows=table_rows,
                prefix_lens=bounds, extend_lens=[width] * size,
                out_cache_loc=slots[:, :width],
                device_lens=(device.table_rows, device.seq_lens, device.width),
            )
            return runner.run_draft(extend, features)  # [B * W, H]

        outputs = accept_and_extend(runner, ops, out, result, tree.tokens, verify_slots,
                                    device.seq_lens, topk, width, run_extend)
        return self._in_flight(batch, reserve, width, outputs)

    def _in_flight(self, batch: DecodeBatch, reserve: int, width: int,
                   outputs: tuple[torch.Tensor, ...]) -> SpecInFlight:
        """The launched iteration, its packed results on their way to the host; ``outputs``
        as ``accept_and_extend`` returns them."""
        runner = self.context.runner
        packed, seq_next, bonus, probs, ids, last = outputs
        on_device = runner.asynchronous
        host = torch.empty(packed.shape, dtype=torch.int64, pin_memory=on_device)
        host.copy_(packed, non_blocking=on_device)
        ready = None
        if on_device:
            ready = torch.Event(device=runner.device)
            ready.record()
        return SpecInFlight(list(batch.requests), batch.steps, batch.spec, reserve, [], host,
                            ready, width, seq_next, bonus, DraftState(probs, ids, last))

    def _apply(self, flight: SpecInFlight, reserve: int,
               keep: Sequence[bool] | None = None) -> list[list[int]]:
        """Read ``flight`` back and advance the host to it: cached lengths, the table rows
        (keeping ``reserve`` positions for the iteration launched since), the draft's
        state; only for the requests ``keep`` marks (all by default). Returns each
        request's emitted tokens (``[]`` for one not kept)."""
        table = self.context.runner.table
        width = flight.width
        kept = list(keep) if keep is not None else [True] * len(flight.requests)
        emitted = []
        for request, packed, k in zip(flight.requests, flight.read(), kept, strict=True):
            if not k:
                emitted.append([])
                continue
            accepted, bonus = packed[0], packed[1]
            path = packed[2 : 2 + accepted]
            tokens = packed[2 + width :]
            emitted.append([tokens[node] for node in path[1:]] + [bonus])
            request.cached_len += accepted
        # in reverse, as the eager iteration truncates: the next reserves get the same slots
        for request, k in zip(reversed(flight.requests), reversed(kept), strict=True):
            if not k:
                continue
            assert request.table_row is not None
            limit = request.cached_len + reserve
            if table.length(request.table_row) > limit:
                table.truncate(request.table_row, limit)
        self.context.draft.states.store([r.request_id for r in flight.requests],
                                        flight.state_next, kept)
        return emitted
