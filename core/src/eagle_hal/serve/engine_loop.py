"""One engine loop on its own thread, fed by the server's asyncio handlers.

The ``Engine`` is not thread-safe, and it batches continuously only if every request goes
through the one instance: so a single thread owns it and runs ``step()`` while any request
is unfinished, exactly as ``LLM.generate`` does. Handlers never touch it. They hand it
work through a command queue (``submit``, ``cancel``), which the engine thread applies
between two steps, and they receive each request's deltas in an ``asyncio.Queue`` that the
engine thread fills through ``loop.call_soon_threadsafe`` (one call a step for all the
deltas of that step).

Cancellation (a client that disconnects or stops reading) is applied between steps too.
With overlap on, the worker may hold one iteration in flight that includes the cancelled
request, and ``Engine.cancel`` then frees its KV pages before that iteration is read back:
the same thing the engine does for a request that finishes while it rides along in the
iteration in flight (``speculative.overlap``). The iteration's writes into those pages
were queued on the device before any later use of them, and its read-back drops the
cancelled request's tokens (the request is finished), so freeing is safe from the engine
thread between steps. What would not be safe is calling ``Engine.cancel`` from another
thread while ``step()`` runs; the command queue is what rules that out.

Back-pressure: ``max_batch_size`` requests run at once; past them up to ``max_waiting``
wait. A submission that would exceed that gets ``Overloaded`` (the server's 429); once
shutting down, ``ShuttingDown`` (503). Shutdown lets what runs finish until a deadline,
then ends the rest with an error.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

from eagle_hal.engine.request import (
    FinishReason,
    Request,
    RequestOutput,
    SamplingParams,
    StreamDelta,
)

__all__ = ["EngineLoop", "Event", "Job", "Overloaded", "ShuttingDown"]

_log = logging.getLogger(__name__)


class Overloaded(Exception):
    """More requests would wait than ``max_waiting`` allows."""


class ShuttingDown(Exception):
    """The server is shutting down (or its engine failed) and takes no new requests."""


@dataclasses.dataclass(slots=True)
class Event:
    """What a job's queue receives: a delta (``delta``), then, once, the end: the
    request's output (``output``) or why it failed (``error``)."""

    job: Job
    delta: StreamDelta | None = None
    output: RequestOutput | None = None
    error: str | None = None

    @property
    def final(self) -> bool:
        return self.output is not None or self.error is not None


@dataclasses.dataclass(eq=False, slots=True)
class Job:
    """One engine request as the server tracks it. ``tag``: the caller's (a choice index);
    ``queue`` and ``loop``: where its events go (several jobs of one HTTP request share a
    queue)."""

    prompt_ids: list[int]
    params: SamplingParams
    queue: asyncio.Queue[Event]
    loop: asyncio.AbstractEventLoop
    tag: Any = None
    received: float = dataclasses.field(default_factory=time.perf_counter)
    request: Request | None = None  # the engine's, set on the engine thread
    last_token_time: float | None = None
    done: bool = False  # set on the event loop when its final event arrives
    cache_scope: str | None = None  # the prefix cache's scope (serve.auth.cache_scope)


class EngineLoop:
    """Runs ``llm.engine`` on a thread (see the module docstring). ``metrics``: a
    ``serve.metrics.ServerMetrics`` (or ``None``)."""

    def __init__(self, llm: Any, *, max_waiting: int = 256, metrics: Any = None) -> None:
        self.llm = llm
        self.engine = llm.engine
        self.max_batch_size = llm.scheduler.config.max_batch_size
        self.max_waiting = max_waiting
        self.metrics = metrics
        self._commands: collections.deque[tuple[str, Any]] = collections.deque()
        self._wake = threading.Condition()
        self._jobs: dict[int, Job] = {}  # by engine request id; the engine thread's
        self._thread: threading.Thread | None = None
        self._stop = False
        self._drain_deadline: float | None = None
        self.outstanding = 0  # jobs submitted and not finished; the event loop's
        self.shutting_down = False
        self.failure: BaseException | None = None
        # set under ``_wake`` once the engine thread reads no more commands: a submission
        # that passed the ``alive`` check as the thread ended is refused, not left unread
        self._closed = False

    # -- lifecycle (any thread) -------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="eagle-hal-engine",
                                            daemon=True)
            self._thread.start()

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.failure is None

    def begin_shutdown(self, grace_s: float) -> None:
        """Take no new requests; let the running ones finish for ``grace_s`` seconds, then
        end the rest with an error."""
        self.shutting_down = True
        with self._wake:
            self._drain_deadline = time.monotonic() + grace_s
            self._wake.notify()

    def stop(self, timeout_s: float = 10.0) -> None:
        """End every request still running (with an error) and stop the thread."""
        self.shutting_down = True
        with self._wake:
            self._stop = True
            self._wake.notify()
        if self._thread is not None:
            self._thread.join(timeout_s)

    # -- the event loop's side --------------------------------------------------------------

    def submit(self, jobs: Sequence[Job]) -> None:
        """Queue ``jobs`` (all or none); ``Overloaded`` / ``ShuttingDown`` when refused.
        Called on the event loop."""
        if self.shutting_down or not self.alive:
            raise ShuttingDown(self._refusal())
        if self.outstanding + len(jobs) > self.max_batch_size + self.max_waiting:
            raise Overloaded(
                f"{self.outstanding} requests are running or waiting; at most "
                f"{self.max_batch_size} run and {self.max_waiting} wait (--max-waiting)")
        self._command("submit", list(jobs))
        self.outstanding += len(jobs)
        if self.metrics is not None:
            self.metrics.outstanding(self.outstanding)

    def cancel(self, jobs: Sequence[Job]) -> None:
        """Cancel those of ``jobs`` not finished yet (the client went away). Called on the
        event loop; applied by the engine thread between steps."""
        pending = [job for job in jobs if not job.done]
        if pending:
            with contextlib.suppress(ShuttingDown):  # closed: every job has its end already
                self._command("cancel", pending)

    def _command(self, kind: str, jobs: list[Job]) -> None:
        with self._wake:
            if self._closed:
                raise ShuttingDown(self._refusal())
            self._commands.append((kind, jobs))
            self._wake.notify()

    def _refusal(self) -> str:
        return ("the server is shutting down" if self.failure is None
                else f"the engine failed: {self.failure}")

    def _delivered(self, events: list[Event]) -> None:
        """On the event loop: hand each event to its job's queue."""
        for event in events:
            if event.final:
                if event.job.done:
                    continue
                event.job.done = True
                self.outstanding -= 1
            event.job.queue.put_nowait(event)
        if self.metrics is not None:
            self.metrics.outstanding(self.outstanding)

    # -- the engine thread ------------------------------------------------------------------

    def _run(self) -> None:
        try:
            while self._iterate():
                pass
        except BaseException as error:  # noqa: BLE001 - every request must learn of it
            _log.exception("the engine failed; every request ends with an error")
            self.failure = error
            self.shutting_down = True
            self._fail_all(f"the engine failed: {type(error).__name__}: {error}")
            return
        self._fail_all("the server is shutting down")  # submitted as it stopped

    def _iterate(self) -> bool:
        """Apply the commands, then one engine step; ``False`` once stopped."""
        engine = self.engine
        with self._wake:
            while not self._commands and not engine.has_unfinished() and not self._stop:
                self._wake.wait()
            commands = list(self._commands)
            self._commands.clear()
            stop, deadline = self._stop, self._drain_deadline
        events: list[Event] = []
        for kind, jobs in commands:
            if kind == "submit":
                for job in jobs:
                    if stop:
                        events.append(Event(job, error="the server is shutting down"))
                        continue
                    try:
                        job.request = engine.add_request(job.prompt_ids, job.params,
                                                         cache_scope=job.cache_scope)
                    except ValueError as refused:  # parsing checks first; a last guard
                        events.append(Event(job, error=str(refused)))
                        continue
                    self._jobs[job.request.request_id] = job
            else:
                for job in jobs:
                    events += self._cancel(job, None)
        if stop or (deadline is not None and time.monotonic() >= deadline):
            for job in list(self._jobs.values()):
                events += self._cancel(job, "the server is shutting down")
        if not stop and engine.has_unfinished():
            events += self._dispatch(engine.step())
        self._publish(events)
        if self.metrics is not None:
            self.metrics.engine_state(self.llm)
        return not stop

    def _cancel(self, job: Job, error: str | None) -> list[Event]:
        request = job.request
        if request is None or self._jobs.get(request.request_id) is not job:
            return []  # finished already (its final event is on its way)
        self.engine.cancel(request.request_id)
        output = self._finish(job)
        return [Event(job, output=output if error is None else None, error=error)]

    def _finish(self, job: Job) -> RequestOutput:
        request = job.request
        assert request is not None
        self._jobs.pop(request.request_id, None)
        if request.finish_reason is None:  # cancelled before it ran a step
            request.finish_reason = FinishReason.CANCELLED
        output = self.engine.output(request)
        self.engine.forget(request)
        if self.metrics is not None:
            self.metrics.finished(job, output)
        return output

    def _dispatch(self, deltas: Sequence[StreamDelta]) -> list[Event]:
        now = time.perf_counter()
        events = []
        for delta in deltas:
            job = self._jobs.get(delta.request_id)
            if job is None:
                continue
            if delta.token_ids and self.metrics is not None:
                self.metrics.tokens(job, len(delta.token_ids), now)
            if delta.token_ids:
                job.last_token_time = now
            events.append(Event(job, delta=delta))
            if delta.finished:
                output = self._finish(job)
                events.append(Event(job, output=output,
                                    error=output.error if output.finish_reason
                                    is FinishReason.ERROR else None))
        return events

    def _publish(self, events: list[Event]) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list[Event]] = {}
        for event in events:
            by_loop.setdefault(event.job.loop, []).append(event)
        for loop, batch in by_loop.items():
            try:
                loop.call_soon_threadsafe(self._delivered, batch)
            except RuntimeError:  # that loop is closed: nobody is waiting any more
                pass

    def _fail_all(self, message: str) -> None:
        events = []
        for job in list(self._jobs.values()):
            try:
                if job.request is not None:
                    self.engine.cancel(job.request.request_id)
            except Exception:  # noqa: BLE001, S110 - the engine is broken already
                pass
            events.append(Event(job, error=message))
        self._jobs.clear()
        with self._wake:
            self._closed = True
            for kind, jobs in self._commands:
                if kind == "submit":
                    events += [Event(job, error=message) for job in jobs]
            self._commands.clear()
        self._publish(events)
