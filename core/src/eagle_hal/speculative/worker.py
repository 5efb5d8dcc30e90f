"""The device-neutral EAGLE worker: admits requests (prefill), picks the iteration strategy
for each decode call, and hands the emitted tokens to the engine (``engine.engine.Worker``).

Everything device-specific sits behind the ``ModelRunner`` (attention backends, KV storage)
and ``SamplingOps`` (tree arithmetic, possibly fused kernels). The iteration itself is one
of three strategies over a shared ``IterationContext`` (``speculative.iteration``):

* ``OverlappedPlain`` at S = 0 where the device runs asynchronously to the host (plain
  decoding, and the adaptive mode with speculation off): one iteration in flight;
* ``OverlappedSpeculative`` at S > 0 on such a device, where the tree-mask layout and
  the attention backends allow it: one speculative iteration in flight;
* ``EagerIteration`` everywhere else: the first iteration of a batch, the benchmark's
  timed split pass, several processes, devices that run in step with the host.

An iteration in flight that the next call cannot continue (another depth or shape, the
timed pass, another strategy) is applied first, and that call launches nothing. ``S = 0``
(the adaptive controller's choice) runs a one-node tree and no draft at all, so it costs
what plain decoding costs; the emitted tokens and their features wait in
``speculative.catchup`` until the next iteration with S > 0 catches the draft up. With no
draft model, or a fixed ``num_steps == 0``, the worker is plain decoding, the baseline.

A ``Drafter`` (``speculative.drafter``: the n-gram drafter, ``speculative.ngram``; the
early-exit self-drafter, ``speculative.self_draft``; a standalone draft model,
``speculative.draft_model``) takes the EAGLE head's place: it proposes from what the
previous iteration read back, so every decode call runs ``EagerIteration``; the adaptive
controller chooses its depth as it does the head's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.engine.runner import ModelRunner
from eagle_hal.engine.scheduler import Scheduler
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import SamplingOps
from eagle_hal.speculative.adaptive import AdaptiveController
from eagle_hal.speculative.catchup import CatchUpTotals
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.draft_tracker import DraftTracker, table_row
from eagle_hal.speculative.drafter import Drafter
from eagle_hal.speculative.drafting import DraftState, single_node_tree
from eagle_hal.speculative.eager import EagerIteration, sample_tree
from eagle_hal.speculative.iteration import (
    DecodeBatch,
    Iteration,
    IterationContext,
    IterationTimes,
    Outputs,
    still_running,
)
from eagle_hal.speculative.oracle_accept import OracleAccept
from eagle_hal.speculative.overlap import OverlappedPlain
from eagle_hal.speculative.speculative_overlap import OverlappedSpeculative

__all__ = ["EagleWorker", "IterationTimes"]


class EagleWorker:
    """Runs prefill and decode iterations for the engine (see the module docstring).

    ``overlap``: keep an iteration in flight (``None``: where the device runs asynchronously
    to the host); ``timed``: the eager iterations' phase times (``times``) with a device
    sync per phase. ``spec``, ``controller``, ``overlap`` and ``timed`` may be changed
    between calls. ``drafter``: proposes the trees in place of the runner's EAGLE head
    (which then never runs)."""

    def __init__(
        self,
        runner: ModelRunner,
        ops: SamplingOps,
        spec: SpecConfig,
        *,
        seed: int | None = None,
        timed: bool = False,
        overlap: bool | None = None,
        drafter: Drafter | None = None,
    ) -> None:
        self.runner = runner
        deepest = max(spec.adaptive_steps) if spec.adaptive else spec.num_steps
        # a draft that can never be asked to speculate is not run at all
        has_draft = runner.draft is not None and drafter is None and deepest > 0
        drafter = drafter if deepest > 0 else None
        if drafter is not None and hasattr(drafter, "bind"):  # a model's drafter
            drafter.bind(runner)
        self.speculates = has_draft or drafter is not None
        controller = (
            AdaptiveController(spec.adaptive_steps, ema=spec.adaptive_ema,
                               hysteresis=spec.adaptive_hysteresis)
            if spec.adaptive and self.speculates else None
        )
        self.context = IterationContext(runner, ops, spec, DraftTracker(runner, has_draft),
                                        controller, seed, drafter)
        self.context.timer.enabled = timed
        # several processes decode in lockstep, each reading back every iteration
        self._may_overlap = runner.parallel.world_size == 1
        self.overlap = runner.asynchronous if overlap is None else overlap
        self.eager = EagerIteration(self.context)
        # decode iterations run eagerly although they could overlap, because a request in
        # the batch asks for logprobs, a logit bias or a penalty (the server exports it)
        self.forced_eager_iterations = 0
        self.plain = OverlappedPlain(self.context)
        self.speculative = OverlappedSpeculative(self.context, self.eager)
        self.last_depth: int | None = None  # the depth of the latest decode call

    def accept_by_oracle(self, oracle: OracleAccept) -> None:
        """Benchmarks only: every later verify accepts exactly ``oracle.tau - 1`` drafts
        plus the bonus token (``speculative.oracle_accept``), which measures the engine's
        cost at that accept length and is never a speedup. Before any decode or graph
        capture, so that no iteration in flight or recorded graph keeps the real accept."""
        if not isinstance(oracle, OracleAccept):
            raise TypeError(f"accept_by_oracle takes an OracleAccept, not {oracle!r}")
        graphs = self.runner.graphs
        if self.in_flight or (graphs is not None and graphs.num_graphs):
            raise RuntimeError("accept_by_oracle must come before the first decode and "
                               "graph capture")
        self.context.ops = oracle.wrap(self.context.ops)

    # -- what callers may read and change between calls ----------------------------------------

    @property
    def overlap(self) -> bool:
        return self._overlap

    @overlap.setter
    def overlap(self, value: bool) -> None:
        self._overlap = bool(value) and self._may_overlap

    @property
    def spec(self) -> SpecConfig:
        return self.context.spec

    @spec.setter
    def spec(self, spec: SpecConfig) -> None:
        self.context.spec = spec

    @property
    def controller(self) -> AdaptiveController | None:
        return self.context.controller

    @controller.setter
    def controller(self, controller: AdaptiveController | None) -> None:
        self.context.controller = controller

    @property
    def timed(self) -> bool:
        return self.context.timer.enabled

    @timed.setter
    def timed(self, value: bool) -> None:
        self.context.timer.enabled = value

    @property
    def times(self) -> IterationTimes:
        return self.context.timer.times

    @times.setter
    def times(self, times: IterationTimes) -> None:
        self.context.timer.times = times

    @property
    def has_draft(self) -> bool:
        return self.context.draft.enabled

    @property
    def draft(self) -> DraftTracker:
        return self.context.draft

    @property
    def iterations_at_depth(self) -> Counter[int]:
        return self.context.iterations_at_depth

    @property
    def catch_ups(self) -> CatchUpTotals:
        return self.context.draft.catch_ups

    @property
    def in_flight(self) -> bool:
        """Whether an iteration is launched and not read back."""
        return self.plain.in_flight is not None or self.speculative.in_flight is not None

    def draft_states(self, requests: Sequence[Request]) -> DraftState:
        """The requests' draft states as the last draft extend left them, stacked ``[B, ...]``."""
        return self.context.draft.states_of(requests)

    @torch.inference_mode()
    def catch_up(self, requests: Sequence[Request]) -> bool:
        """Catch the draft of the lagging ``requests`` up (``DraftTracker.catch_up``)."""
        return self.context.draft.catch_up(requests)

    # -- engine interface --------------------------------------------------------------------

    def headroom(self, batch_size: int) -> int:
        steps = max(self.spec.adaptive_steps) if self.controller else self.spec.num_steps
        if not self.speculates or steps == 0:
            return 1
        spec = self.context.spec_at(steps)
        return max(spec.draft_tokens, steps * spec.topk)

    def steps_for(self, batch_size: int) -> int:
        if not self.speculates:
            return 0
        if self.controller is not None:
            # the controller times iterations, which differ per rank: rank 0 decides
            return self.runner.parallel.broadcast_ints([self.controller.choose(batch_size)])[0]
        return self.spec.num_steps

    def release(self, request: Request) -> None:
        if request.table_row is not None and self.runner.table.prefix_cache is not None:
            self._publish(request)
        self.context.draft.forget(request)
        self.context.sampling.forget()
        self.context.processing.forget(request)
        if self.context.drafter is not None:
            self.context.drafter.release(request.request_id)

    def _publish(self, request: Request) -> None:
        """Publish the full pages of a request's generated text too (a later turn of a
        conversation starts with it): positions whose K/V are final in both models and
        hold its tokens. Past ``len(all_ids) - 1`` lie K/V of accepted tokens the stop cut
        off; a draft that idled (S = 0) holds its own K/V only up to where it lags from."""
        lag = self.context.draft.pending.lag(request.request_id)  # 0 without a draft
        valid = min(request.cached_len - lag, request.num_tokens - 1)
        self.runner.table.cache_prefix(table_row(request), request.all_ids, valid)

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Read back the iteration in flight without launching another: the requests it
        advanced that still run, each with its tokens; ``[]`` if none."""
        if self.speculative.in_flight is not None:
            return self.speculative.drain()
        return self.plain.drain()

    @torch.inference_mode()
    def prefill(self, requests: Sequence[Request]) -> list[list[int]]:
        """Prefill ``requests``: the target over each prompt, the first token sampled (a
        fresh request's; a resumed one keeps its last), the draft extended over the prompt
        shifted by one and that token."""
        context = self.context
        flights = [f for f in (self.plain.in_flight, self.speculative.in_flight) if f is not None]
        if self.controller is not None and any(still_running(f.requests) for f in flights):
            # the prefill's read-back would wait for the iteration in flight: let it finish
            # first, on the depth's clock (speculative.reports.ControllerReports.absorb).
            # An iteration whose requests have all finished (left by the last call of a
            # run) is not: the time since that call is idle, no depth's
            self.runner.backend.synchronize()
            context.reports.absorb(time.perf_counter())
        context.reports.prefill()
        try:
            return self._prefill(requests)
        finally:
            context.reports.prefilled(time.perf_counter())

    def _prefill(self, requests: Sequence[Request]) -> list[list[int]]:
        runner, context = self.runner, self.context
        contexts = [Scheduler.context_ids(r) for r in requests]
        lengths = [len(c) for c in contexts]
        table_rows = [table_row(r) for r in requests]
        # a row admitted on a prefix-cache hit starts with the cached pages: the target and
        # the draft run only over the rest (at least the last token, whose logits and
        # hidden state start the generation)
        prefixes = [runner.table.length(row) for row in table_rows]
        suffixes = [n - p for n, p in zip(lengths, prefixes, strict=True)]
        for row, length in zip(table_rows, lengths, strict=True):
            runner.table.reserve(row, length)
        runner.sync_table()
        batch = runner.causal_batch(
            ForwardMode.EXTEND, [t for c, p in zip(contexts, prefixes, strict=True)
                                 for t in c[p:]], table_rows, prefixes, suffixes,
        )
        out = runner.run_target(batch, context.aux_layers)
        last, lengths_device, counters = runner.upload(
            [end - 1 for end in _cumsum(suffixes)], lengths, [2 * n + 1 for n in lengths]
        )  # [B] each: last prompt token, prompt lengths, sampling counters
        logits = runner.target.compute_logits(out.hidden_states[last])[:, None, :]  # [B, 1, V]
        fresh = [not r.output_ids for r in requests]
        tree = single_node_tree(batch.input_ids[last], lengths_device)
        result, logprobs = sample_tree(context, logits, requests, tree, 0, counters)
        sampled = result.bonus_tokens.tolist()
        if logprobs is not None:  # a fresh request's first token (a resumed one keeps its last)
            for request, entries, f in zip(requests, logprobs, fresh, strict=True):
                request.pending_logprobs = entries if f else []
        roots = [s if f else r.output_ids[-1]
                 for s, f, r in zip(sampled, fresh, requests, strict=True)]
        for request, length in zip(requests, lengths, strict=True):
            request.cached_len = length
        if self.has_draft:
            for request in requests:  # a resumed request's draft starts over with its KV
                context.draft.pending.drop(request.request_id)
            draft_ids = [t for c, p, root in zip(contexts, prefixes, roots, strict=True)
                         for t in c[p + 1:] + [root]]
            features = runner.draft.project_target_features(out)  # [T, H]
            # as the target's prefill, no graph per prompt length (one would be captured
            # for nearly every request and replayed almost never): a token bucket's graph
            # (GraphRunner.prefill_bucket), else eager
            context.draft.extend(requests, draft_ids, features, prefixes, suffixes,
                                 prefill=True)
        for row, c, root, length in zip(table_rows, contexts, roots, lengths, strict=True):
            # both models' K/V below the context's end are final: publish its full pages
            runner.table.cache_prefix(row, c + [root], length)
        return [[root] if f else [] for root, f in zip(roots, fresh, strict=True)]

    @torch.inference_mode()
    def decode(self, requests: Sequence[Request]) -> list[list[int]]:
        start = time.perf_counter()
        reports = self.context.reports
        steps = self.last_depth = self._fitting_depth(requests, self.steps_for(len(requests)))
        since = reports.begin(steps, start)  # the controller's clock (speculative.reports)
        try:
            batch = DecodeBatch(requests, steps, self.context.spec_at(steps, len(requests)),
                                start, since)
            out = self._finish_first(batch) or self._strategy(batch).decode(batch)
            if out.read_back:
                reports.read_back(out.emitted)
            elif out.accept is not None and self.controller is not None:
                reports.report(self.controller, batch.size, steps, out.accept,
                               time.perf_counter() - since, out.catch_up)
        finally:
            reports.end(time.perf_counter(), since, self.controller is not None)
        return out.emitted

    def _fitting_depth(self, requests: Sequence[Request], steps: int) -> int:
        """The deepest depth up to ``steps`` whose reserved block fits every request's
        context. Near its end the tree shrinks (down to S = 0, a plain decoding step)
        rather than the request stopping early: the engine finishes a request only when
        it holds ``max_context`` tokens, as plain decoding does, so both emit the same."""
        if steps == 0 or not requests:
            return steps
        room = self.runner.table.max_context - max(r.cached_len for r in requests)
        for depth in range(steps, 0, -1):
            spec = self.context.spec_at(depth, len(requests))
            # the eager reservation, and the longest accepted path the overlapped one adds
            if max(spec.draft_tokens, depth * spec.topk, depth + 1) <= room:
                return depth
        return 0

    def _overlaps(self, steps: int) -> bool:
        # a host Drafter proposes from what the previous iteration read back
        return self.overlap and not self.timed and self.context.drafter is None and (
            steps == 0 or self.speculative.eligible(steps))

    def _finish_first(self, batch: DecodeBatch) -> Outputs | None:
        """Apply a speculative iteration in flight that ``batch`` cannot continue (another
        depth or shape, the timed pass, S = 0): its tokens are this call's, which then
        launches nothing. ``None``: nothing to apply, the call runs its strategy."""
        speculative = self.speculative
        if speculative.in_flight is None or (
            batch.steps > 0 and self._overlaps(batch.steps) and speculative.continues(batch)
            and not _eager_only(batch.requests)
        ):
            return None
        finished = speculative.finish(batch.requests)
        return Outputs(finished, read_back=True) if finished is not None else None

    def _strategy(self, batch: DecodeBatch) -> Iteration:
        """The strategy of this call; the others' iterations in flight are given up."""
        overlaps = self._overlaps(batch.steps)
        if not overlaps or _eager_only(batch.requests):
            chosen: Iteration = self.eager
            self.forced_eager_iterations += overlaps
        elif batch.steps == 0:
            chosen = self.plain
        else:
            chosen = self.speculative
        for strategy in (self.speculative, self.plain):
            if strategy is not chosen:
                strategy.discard()
        return chosen


def _eager_only(requests: Sequence[Request]) -> bool:
    """Whether the batch needs the eager iteration: a request with a logit bias or a
    penalty, or one that asks for logprobs. Penalties count the tokens before each
    position, which an overlapped launch does not have on the host (the previous
    iteration's are still on the device), and the verify-accept-extend graph records a
    greedy accept without the logits stage; logprobs are read back per emitted token.
    (min-p, top-k and top-p reach every strategy through the sampling tensors.)"""
    return any(r.params.processes_logits or r.params.logprobs is not None for r in requests)


def _cumsum(values: Sequence[int]) -> list[int]:
    total, out = 0, []
    for v in values:
        total += v
        out.append(total)
    return out
