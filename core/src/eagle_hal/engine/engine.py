"""The engine loop: requests in, per-request deltas and outputs out.

``Engine`` joins the integer scheduler, a worker (EAGLE or plain decoding) and the
tokenizer. Each ``step()`` runs one prefill batch or one decode iteration, appends the
emitted tokens (stopping exactly where plain decoding would), finishes and frees what is
done, and returns the deltas of that step.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from eagle_hal.engine.request import (
    FinishReason,
    Request,
    RequestOutput,
    RequestStatus,
    SamplingParams,
    StreamDelta,
)
from eagle_hal.engine.scheduler import DecodeWork, PrefillWork, Scheduler
from eagle_hal.engine.step_ledger import StepLedger
from eagle_hal.engine.stopping import Detokenizer, append_tokens, finish_text, safe_stream_text
from eagle_hal.errors import InvalidArgument

__all__ = ["Engine", "StepResult", "Worker"]


class Worker(Protocol):
    """What the engine needs from a decoding worker (``speculative.worker.EagleWorker``)."""

    #: the draft depth S of the latest decode call (``None`` before any, or for a worker
    #: without a draft): the step ledger's account of where a run's time goes
    last_depth: int | None

    def headroom(self, batch_size: int) -> int:
        """Positions past a request's cached length that one decode iteration may reserve."""
        ...

    def prefill(self, requests: Sequence[Request]) -> list[list[int]]:
        """Prefill ``requests`` (fresh or resumed); returns each one's emitted tokens (the
        first sampled token for a fresh request, none for a resumed one)."""
        ...

    def decode(self, requests: Sequence[Request]) -> list[list[int]]:
        """One decode iteration over running requests; returns each one's emitted tokens.
        A worker that keeps an iteration in flight returns them one call late (``[]`` for
        a request the call only launched)."""
        ...

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Read back the iteration in flight without launching another: each request it
        advanced that still runs, with its tokens; ``[]`` when nothing is in flight (a
        worker that never overlaps always returns ``[]``)."""
        ...

    def release(self, request: Request) -> None:
        """Forget any per-request state (the scheduler frees its KV pages)."""
        ...


class StepResult(list[StreamDelta]):
    """The deltas of one engine step."""


class Engine:
    def __init__(
        self,
        worker: Worker,
        scheduler: Scheduler,
        detokenizer: Detokenizer | None,
        eos_token_ids: Sequence[int] = (),
    ) -> None:
        self.worker = worker
        self.scheduler = scheduler
        self.detokenizer = detokenizer
        self.eos_token_ids = tuple(eos_token_ids)
        self._ids = itertools.count()
        self._requests: dict[int, Request] = {}
        # where a run's time goes, per step (``engine.step_ledger``; a benchmark sets it)
        self.ledger: StepLedger | None = None

    # -- requests --------------------------------------------------------------------------

    def add_request(self, prompt_ids: Sequence[int], params: SamplingParams, *,
                    cache_scope: str | bytes | None = None) -> Request:
        """Queue a request. An empty prompt raises ``ValueError``; one that cannot fit the
        context is finished at once with an error (``output.error`` says why).
        ``cache_scope``: the prefix cache's scope for it (``None``: the shared one);
        requests of different scopes never share KV pages."""
        if not prompt_ids:
            raise ValueError("a prompt must contain at least one token")
        # refused here, not inside step(), where it would fail the whole batch
        vocab = getattr(getattr(self.worker, "context", None), "vocab_size", None)
        if vocab is not None and any(t >= vocab for t in params.logit_bias or ()):
            raise InvalidArgument("logit_bias", params.logit_bias,
                                  f"token ids below the vocabulary size {vocab}")
        request = Request(
            request_id=next(self._ids),
            prompt_ids=list(prompt_ids),
            params=params,
            eos_token_ids=self.eos_token_ids,
        )
        self._requests[request.request_id] = request
        self.scheduler.add(request, cache_scope)
        return request

    def cancel(self, request_id: int) -> None:
        """Stop a request now and free its resources (no effect once it has finished)."""
        request = self._requests.get(request_id)
        if request is None or request.finished:
            return
        finish_text(request, self.detokenizer)
        self.worker.release(request)
        self.scheduler.finish(request, FinishReason.CANCELLED)

    def has_unfinished(self) -> bool:
        return self.scheduler.has_work() or bool(self.scheduler.rejected)

    # -- stepping --------------------------------------------------------------------------

    def step(self) -> StepResult:
        """Run one prefill batch or one decode iteration; return what changed."""
        result = StepResult()
        headroom = self.worker.headroom(len(self.scheduler.running) or 1)
        drained: list[Request] = []
        taken = 0  # output tokens appended this step (the time ledger's)
        if self.scheduler.running and not self.scheduler.can_grow(headroom):
            # an iteration in flight holds a position the host has not read: read it back
            # before the scheduler preempts or rejects for want of KV pages
            for request, tokens in self.worker.drain():
                taken += self._absorb(request, tokens, counts_as_verify=True)
                drained.append(request)
        work = self.scheduler.schedule(headroom)
        if isinstance(work, PrefillWork):
            emitted = self.worker.prefill(work.requests)
            now = time.perf_counter()
            for request, tokens in zip(work.requests, emitted, strict=True):
                if tokens and request.stats.first_token_time is None:
                    request.stats.first_token_time = now
                taken += self._absorb(request, tokens, counts_as_verify=False)
            touched: Sequence[Request] = work.requests
        elif isinstance(work, DecodeWork):
            emitted = self.worker.decode(work.requests)
            for request, tokens in zip(work.requests, emitted, strict=True):
                taken += self._absorb(request, tokens, counts_as_verify=True)
            touched = work.requests
        else:
            touched = ()
        if self.ledger is not None and touched:
            prefill = isinstance(work, PrefillWork)
            self.ledger.record(
                "prefill" if prefill else "decode", len(touched),
                None if prefill else self.worker.last_depth,
                taken,
            )
        touched = [r for r in drained if all(r is not t for t in touched)] + list(touched)
        for request in self.scheduler.rejected:
            self.worker.release(request)
        touched = list(touched) + self.scheduler.rejected
        self.scheduler.rejected = []
        for request in touched:
            delta = self._delta(request)
            if delta is not None:
                result.append(delta)
        return result

    def _absorb(self, request: Request, tokens: Sequence[int], *, counts_as_verify: bool) -> int:
        """Append ``tokens`` to ``request`` up to its stop; returns how many it took."""
        if request.finished:
            return 0
        if counts_as_verify and tokens:  # none: its iteration is still in flight
            request.stats.verify_steps += 1
            request.stats.accepted_tokens += len(tokens)
        before = len(request.output_ids)
        # a speculative path may run past the context's end: the tokens plain decoding
        # could not have reached are cut, so that both stop at the same token
        room = self.scheduler.config.max_context - request.num_tokens
        append_tokens(request, tokens[: max(room, 0)], self.detokenizer)
        request.stats.output_tokens = len(request.output_ids)
        taken = request.stats.output_tokens - before
        if request.finish_reason is None and self._context_full(request):
            request.finish_reason = FinishReason.CONTEXT_FULL
        if request.finish_reason is not None:
            finish_text(request, self.detokenizer)
            request.stats.finish_time = time.perf_counter()
            self.worker.release(request)
            self.scheduler.finish(request, request.finish_reason)
        return taken

    def _context_full(self, request: Request) -> bool:
        """Whether ``request`` holds ``max_context`` tokens, prompt and output: its next
        token would need a position past the context. Speculation does not end a request
        earlier: near the end the worker shrinks its tree to what the context holds."""
        return request.num_tokens >= self.scheduler.config.max_context

    def _delta(self, request: Request) -> StreamDelta | None:
        text = safe_stream_text(request) if self.detokenizer is not None else ""
        new_text = text[request.streamed_chars :]
        new_ids = request.output_ids[request.streamed_tokens :]
        if not new_text and not new_ids and not request.finished:
            return None
        logprobs = None
        if request.params.logprobs is not None:
            logprobs = tuple(request.logprobs[request.streamed_tokens : len(request.output_ids)])
        request.streamed_chars = len(text)
        request.streamed_tokens = len(request.output_ids)
        return StreamDelta(
            request.request_id, new_text, tuple(new_ids), request.finished, request.finish_reason,
            logprobs,
        )

    # -- driving ---------------------------------------------------------------------------

    def stream(self) -> Iterator[StreamDelta]:
        """Run until every queued request has finished, yielding deltas as they come."""
        while self.has_unfinished():
            yield from self.step()

    def run(self) -> None:
        for _ in self.stream():
            pass

    def output(self, request: Request, prompt: str | None = None) -> RequestOutput:
        if request.status is not RequestStatus.FINISHED or request.finish_reason is None:
            raise RuntimeError(f"request {request.request_id} has not finished")
        return RequestOutput(
            request_id=request.request_id,
            prompt=prompt,
            text=request.text,
            token_ids=tuple(request.output_ids),
            finish_reason=request.finish_reason,
            stats=request.stats,
            error=request.error,
            logprobs=tuple(request.logprobs) if request.params.logprobs is not None else None,
        )

    def forget(self, request: Request) -> None:
        self._requests.pop(request.request_id, None)
