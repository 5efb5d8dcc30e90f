"""The device-neutral EAGLE worker: prefill, then draft -> verify -> accept -> draft extend.

Everything device-specific sits behind the ``ModelRunner`` (attention backends, KV storage)
and ``SamplingOps`` (tree arithmetic, possibly fused kernels); this module only sequences
them. Per decode iteration for B requests, S draft steps, top-k K, N verify nodes:

1. reserve ``max(N, S*K)`` positions past each request's cached length: the draft's
   scratch slots (draft KV store) and the verify slots (target KV store) share them;
2. draft: S - 1 DRAFT_DECODE forwards grow the tree (``grow_tree_step``), then the N - 1
   best nodes are organised and laid out as the verify tree (root = the pending token); a
   chain (K = 1) skips the tree bookkeeping and, with graphs on, replays its whole draft
   loop and layout as one graph (``GraphRunner.run_draft_chain``);
3. verify: one TARGET_VERIFY forward over the N nodes under the tree mask;
4. accept (greedy or lossless tree sampling), read back in the iteration's one host sync;
   move the accepted nodes not already in place (never for plain decoding or chains) to the
   front and free the rest (truncate);
5. draft extend: the draft consumes the emitted tokens with the target's features of the
   accepted nodes, giving the next iteration's top-K and hidden state.

``S = 0`` (the adaptive controller's choice) runs a one-node tree and no draft at all, so it
costs what plain decoding costs: the emitted tokens and their features wait in
``speculative.catchup`` until the next iteration with S > 0 starts with one ragged draft extend
over them. With no draft model, or a fixed ``num_steps == 0``, the worker is plain
decoding, the baseline. At S = 0, on a device that runs asynchronously to the host, the
worker keeps one iteration in flight (``speculative.overlap``), returning each iteration's tokens
one call late; at S > 0 ``speculative.speculative_overlap`` does the same. The iteration without
overlap (steps 1-5 above) is ``speculative.eager_iteration``'s.

Positions: the root sits at position ``seq_len`` (its KV is written by the verify); a draft
node at depth d has target position ``seq_len + d``. The draft reads token ``p + 1`` with the
target's feature at ``p``, so it runs a depth-d node at draft position ``seq_len + d - 1``.
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections import Counter
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.engine.runner import ModelRunner
from eagle_hal.engine.scheduler import Scheduler
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import SamplingOps
from eagle_hal.speculative import speculative_overlap
from eagle_hal.speculative.acceptance import SamplingBatch, accept_tree
from eagle_hal.speculative.adaptive import AdaptiveController
from eagle_hal.speculative.catchup import CatchUpTotals, PendingDraftInputs
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.drafting import DraftState, DraftStates, single_node_tree
from eagle_hal.speculative.eager_iteration import decode_eager
from eagle_hal.speculative.overlap import InFlight, decode_overlapped, discard_in_flight, drain
from eagle_hal.speculative.reports import ControllerReports
from eagle_hal.speculative.speculative_overlap import SpecInFlight

__all__ = ["EagleWorker", "IterationTimes"]


@dataclasses.dataclass(slots=True)
class IterationTimes:
    """Cumulative wall time per phase (host-measured around synchronising points)."""

    draft: float = 0.0
    verify: float = 0.0
    accept: float = 0.0
    draft_extend: float = 0.0
    catch_up: float = 0.0  # the draft's catch-up after a stretch at S = 0 (not in draft_extend)
    iterations: int = 0


class EagleWorker:
    """Runs prefill and decode iterations for the engine (see ``engine.engine.Worker``)."""

    def __init__(
        self,
        runner: ModelRunner,
        ops: SamplingOps,
        spec: SpecConfig,
        *,
        seed: int | None = None,
        timed: bool = False,
        overlap: bool | None = None,
    ) -> None:
        self.runner = runner
        self.ops = ops
        self.spec = spec
        deepest = max(spec.adaptive_steps) if spec.adaptive else spec.num_steps
        # a draft that can never be asked to speculate is not run at all
        self.has_draft = runner.draft is not None and deepest > 0
        self.vocab_size = runner.target.config.vocab_size
        self.aux_layers: tuple[int, ...] = tuple(getattr(runner.draft, "aux_layers", ()) or ())
        self.controller = (
            AdaptiveController(
                spec.adaptive_steps,
                ema=spec.adaptive_ema,
                hysteresis=spec.adaptive_hysteresis,
            )
            if spec.adaptive and self.has_draft
            else None
        )
        # Tensor parallelism: every rank must take the same accept decisions. Rule: all
        # ranks sample with rank 0's base seed (request seeds and ids are the same on every
        # rank, and the logits are bit-identical after the all-gather), so the
        # counter-based noise, hence every draw, is identical; see eagle_hal.parallel.
        local_seed = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self.base_seed = runner.parallel.broadcast_ints([local_seed])[0]
        self.timed = timed
        # plain decoding launches each iteration before reading back the previous one
        # (speculative.overlap); on by default where the device runs asynchronously to the host
        if overlap is None:
            overlap = runner.asynchronous
        self.overlap = overlap and runner.parallel.world_size == 1
        self._in_flight: InFlight | None = None
        self._spec_flight: SpecInFlight | None = None  # speculative.speculative_overlap
        self.reports = ControllerReports()  # the accounts between controller reports
        self.times = IterationTimes()
        self.iterations_at_depth: Counter[int] = Counter()  # decode iterations run at each depth S
        self.states = DraftStates()  # what the last draft extend left for each request
        self._sampling_cache: tuple[tuple[int, ...], SamplingBatch] | None = None
        self._pending = PendingDraftInputs()  # what the draft missed while S = 0
        self.catch_ups = CatchUpTotals()  # catch-ups run and the tokens they extended over
        self.last_depth: int | None = None  # the depth of the latest decode call
        self._one_node: dict[object, tuple[torch.Tensor, ...]] = {}  # single_node_tree's
        # the settings per depth, built once per ``spec`` (which callers may swap): an
        # iteration at S = 0 should cost the host no more than plain decoding does
        self._specs: tuple[SpecConfig, dict[tuple, SpecConfig]] = (spec, {})

    # -- engine interface --------------------------------------------------------------------

    def headroom(self, batch_size: int) -> int:
        steps = max(self.spec.adaptive_steps) if self.controller else self.spec.num_steps
        if not self.has_draft or steps == 0:
            return 1
        spec = self._spec_at(steps)
        return max(spec.draft_tokens, steps * spec.topk)

    def _spec_at(self, steps: int, batch_size: int | None = None) -> SpecConfig:
        """``spec`` at depth ``steps`` (the adaptive controller's choice) for a batch of
        ``batch_size`` (its controller bucket narrows a wide tree, ``SpecConfig.with_steps``;
        ``None``: the widest shape), built once."""
        base, specs = self._specs
        if base is not self.spec:
            base, specs = self.spec, {}
            self._specs = (base, specs)
        bucket, sizes = None, getattr(self.controller, "bucket_sizes", None)
        if batch_size is not None and sizes:  # the controller's bucket of the batch
            bucket = next((size for size in sizes if batch_size <= size), sizes[-1])
        spec = specs.get((steps, bucket))
        if spec is None:
            spec = specs[(steps, bucket)] = base.with_steps(steps, bucket)
        return spec

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Read back the iteration in flight without launching another: the requests it
        advanced that still run, each with its tokens; ``[]`` if none. A speculative
        iteration in flight (``speculative.speculative_overlap``) is applied (``finish``), not
        dropped: dropped, a chain the engine drains before every step for want of KV
        pages would never advance."""
        flight = self._spec_flight
        if flight is not None:
            requests = list(flight.requests)
            finished = speculative_overlap.finish(self, requests)
            if finished is None:
                return []
            self.reports.read_back(finished)
            return [(r, tokens) for r, tokens in zip(requests, finished, strict=False) if tokens]
        return [(request, [token]) for request, token in drain(self)]

    def release(self, request: Request) -> None:
        self.states.drop(request.request_id)
        self._pending.drop(request.request_id)
        self._sampling_cache = None

    def steps_for(self, batch_size: int) -> int:
        if not self.has_draft:
            return 0
        if self.controller is not None:
            # the controller times iterations, which differ per rank: rank 0 decides
            return self.runner.parallel.broadcast_ints([self.controller.choose(batch_size)])[0]
        return self.spec.num_steps

    @torch.inference_mode()
    def prefill(self, requests: Sequence[Request]) -> list[list[int]]:
        flights = [f for f in (self._in_flight, self._spec_flight) if f is not None]
        if self.controller is not None and any(_still_running(f.requests) for f in flights):
            # the prefill's read-back would wait for the iteration in flight: let it finish
            # first, on the depth's clock (speculative.reports.ControllerReports.absorb). An
            # iteration whose requests have all finished (left by the last call of a run)
            # is not: the time since that call is idle, no depth's
            self.runner.backend.synchronize()
            self.reports.absorb(time.perf_counter())
        self.reports.prefill()
        try:
            return self._prefill(requests)
        finally:
            self.reports.prefilled(time.perf_counter())

    def _prefill(self, requests: Sequence[Request]) -> list[list[int]]:
        runner = self.runner
        contexts = [Scheduler.context_ids(r) for r in requests]
        lengths = [len(c) for c in contexts]
        rows = [self._row(r) for r in requests]
        for row, length in zip(rows, lengths, strict=False):
            runner.table.reserve(row, length)
        runner.sync_table()
        batch = runner.causal_batch(
            ForwardMode.EXTEND, [t for c in contexts for t in c], rows, [0] * len(rows), lengths
        )
        out = runner.run_target(batch, self.aux_layers)
        last, lengths_t, counters = runner.upload(
            [end - 1 for end in _cumsum(lengths)], lengths, [2 * n + 1 for n in lengths]
        )  # [B] each: last prompt token, prompt lengths, sampling counters
        logits = runner.target.compute_logits(out.hidden_states[last])[:, None, :]  # [B, 1, V]
        fresh = [not r.output_ids for r in requests]
        tree = single_node_tree(batch.input_ids[last], lengths_t)
        result = accept_tree(
            self.ops, logits, self.vocab_size, tree.tokens, tree.retrieve_next_token,
            tree.retrieve_next_sibling, 0, self._sampling(requests), counters,
        )
        sampled = result.bonus_tokens.tolist()
        roots = [s if f else r.output_ids[-1]
                 for s, f, r in zip(sampled, fresh, requests, strict=False)]
        for request, length in zip(requests, lengths, strict=False):
            request.cached_len = length
        if self.has_draft:
            for request in requests:  # a resumed request's draft starts over with its KV
                self._pending.drop(request.request_id)
            draft_ids = [t for c, root in zip(contexts, roots, strict=False)
                         for t in c[1:] + [root]]
            features = runner.draft.project_target_features(out)  # [T, H]
            # as the target's prefill, no graph per prompt length (one would be captured
            # for nearly every request and replayed almost never): a token bucket's graph
            # (GraphRunner.prefill_bucket), else eager
            self._draft_extend(
                requests, rows, draft_ids, features, [0] * len(rows), lengths, prefill=True
            )
        return [[root] if f else [] for root, f in zip(roots, fresh, strict=False)]

    @torch.inference_mode()
    def decode(self, requests: Sequence[Request]) -> list[list[int]]:
        start = time.perf_counter()
        steps = self.last_depth = self.steps_for(len(requests))
        since = self.reports.begin(steps, start)  # the controller's clock (speculative.reports)
        try:
            emitted = self._decode(requests, steps, start, since)
        finally:
            self.reports.end(time.perf_counter(), since, self.controller is not None)
        return emitted

    def _observe(self, batch_size: int, steps: int, accept: float, seconds: float,
                 catch_up: float = 0.0) -> None:
        assert self.controller is not None
        self.reports.report(self.controller, batch_size, steps, accept, seconds, catch_up)

    def _decode(
        self, requests: Sequence[Request], steps: int, start: float, since: float
    ) -> list[list[int]]:
        batch_size = len(requests)
        overlappable = speculative_overlap.eligible(self, steps)
        flight = self._spec_flight
        if flight is not None and not (
            overlappable and flight.carries(requests, self._spec_at(steps, batch_size))
        ):
            # the speculative iteration in flight cannot be continued (another depth or
            # shape, the timed split pass, S = 0): apply it, launching nothing this call
            finished = speculative_overlap.finish(self, requests)
            if finished is not None:
                self.reports.read_back(finished)
                return finished
        if self.overlap and steps == 0 and not self.timed:
            speculative_overlap.discard(self)
            emitted = decode_overlapped(self, requests)
            if self.controller is not None and any(emitted):  # a call that only launched
                self._observe(batch_size, 0, 1.0, time.perf_counter() - since)
            return emitted
        if overlappable:
            discard_in_flight(self)  # an iteration at S = 0 in flight is recomputed
            overlapped = speculative_overlap.decode_speculative_overlapped(self, requests, steps)
            if overlapped is not None:
                if self.controller is not None and any(overlapped):
                    # per request read back (one that joined returns nothing yet)
                    accepted = sum(map(len, overlapped)) / sum(1 for e in overlapped if e)
                    self._observe(batch_size, steps, accepted, time.perf_counter() - since,
                                  self.reports.overlapped_catch_up())
                return overlapped
        speculative_overlap.discard(self)
        discard_in_flight(self)
        return decode_eager(self, requests, steps, start, since)

    # -- the draft's state ----------------------------------------------------------------------

    @torch.inference_mode()
    def catch_up(self, requests: Sequence[Request]) -> bool:
        """Bring the draft of every lagging request in ``requests`` up to its cached length
        with one ragged draft extend over the pending tokens; returns whether any lagged.
        Their KV positions are below the cached lengths, hence already reserved."""
        pending = self._pending.take([r.request_id for r in requests])
        if pending is None:
            return False
        by_id = {r.request_id: r for r in requests}
        lagging = [by_id[i] for i in pending.request_ids]
        for request, start, count in zip(lagging, pending.draft_lens, pending.extend_lens,
                                         strict=False):
            if start + count != request.cached_len:
                raise RuntimeError(
                    f"request {request.request_id}: the draft lags from {start} by {count} "
                    f"tokens but the target holds {request.cached_len}"
                )
        self.catch_ups.record(len(pending.input_ids))
        # the lengths depend on the stretch at S = 0: a graph per length would not pay, so
        # a token bucket's graph (GraphRunner.prefill_bucket), else eager
        self._draft_extend(
            lagging, [self._row(r) for r in lagging], pending.input_ids, pending.features,
            pending.draft_lens, pending.extend_lens, prefill=True,
        )
        return True

    def catch_up_timed(self, requests: Sequence[Request]) -> None:
        """``catch_up`` before a speculative chain launched with overlap; in the adaptive
        mode its wall time is kept for the controller's next observation (the chain's
        first iteration read back), which charges it to the probe."""
        if self.controller is None or all(r.request_id not in self._pending for r in requests):
            self.catch_up(requests)  # nothing to time: no device sync for it
            return
        self.runner.backend.synchronize()
        start = time.perf_counter()
        if self.catch_up(requests):
            self.runner.backend.synchronize()
            self.reports.chain_catch_up(time.perf_counter() - start)

    def draft_states(self, requests: Sequence[Request]) -> DraftState:
        """The requests' draft states as the last draft extend left them, stacked ``[B, ...]``."""
        return self.states.stacked([r.request_id for r in requests])

    def _draft_extend(
        self,
        requests: Sequence[Request],
        rows: Sequence[int],
        input_ids: Sequence[int],
        features: torch.Tensor,
        prefix_lens: Sequence[int],
        extend_lens: Sequence[int],
        *,
        prefill: bool = False,
    ) -> None:
        """Run the draft over new tokens and keep the batch's last top-K and hidden
        (``prefill``: lengths that vary from call to call, see ``ModelRunner.run_draft``)."""
        runner = self.runner
        batch = runner.causal_batch(ForwardMode.DRAFT_EXTEND, input_ids, rows, prefix_lens,
                                    extend_lens)
        hidden_in = features.to(runner.dtype)
        hidden_out = runner.run_draft(batch, hidden_in, prefill=prefill)  # [T, H]
        if all(n == extend_lens[0] for n in extend_lens):
            last_hidden = hidden_out.view(len(rows), extend_lens[0], -1)[:, -1]  # [B, H]
        else:
            last_hidden = hidden_out[torch.cumsum(batch.extend_lens, 0) - 1]
        probs, ids = runner.draft.topk(last_hidden, self.spec.topk)  # [B, K]
        self.states.store([r.request_id for r in requests], DraftState(probs, ids, last_hidden))

    def _row(self, request: Request) -> int:
        if request.table_row is None:
            raise RuntimeError(f"request {request.request_id} holds no KV row")
        return request.table_row

    def _seed(self, request: Request) -> int:
        if request.params.seed is not None:
            return request.params.seed
        return (self.base_seed * 1_000_003 + request.request_id) & 0x7FFF_FFFF_FFFF

    def _sampling(self, requests: Sequence[Request]) -> SamplingBatch:
        """The batch's sampling tensors, reused while the batch stays the same."""
        key = tuple(r.request_id for r in requests)
        if self._sampling_cache is None or self._sampling_cache[0] != key:
            sampling = SamplingBatch.of(
                [r.params for r in requests], [self._seed(r) for r in requests], self.runner.device
            )
            self._sampling_cache = (key, sampling)
        return self._sampling_cache[1]

    @staticmethod
    def _all_greedy(requests: Sequence[Request]) -> bool:
        return all(r.params.greedy for r in requests)

    def _tick(self, since: float) -> float:
        if self.timed:
            self.runner.backend.synchronize()
        return time.perf_counter()


def _cumsum(values: Sequence[int]) -> list[int]:
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out


def _still_running(requests: Sequence[Request]) -> bool:
    """Whether any of an in-flight iteration's requests still runs (holds its table row)."""
    return any(not r.finished and r.table_row is not None for r in requests)
