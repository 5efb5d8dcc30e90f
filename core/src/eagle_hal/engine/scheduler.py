"""Continuous batching in integers: which requests prefill, which decode, who is preempted.

The scheduler owns the request queue and the ``RequestTokenTable`` (KV pages per request);
it never touches tensors. Each engine step asks ``schedule()`` for work:

* a ``PrefillWork`` when waiting requests fit — under the maximum batch size, the prefill
  token budget and the free KV pages (prompt plus one iteration's headroom);
* otherwise a ``DecodeWork`` over every running request, after making sure each one can
  grow by the iteration's headroom. When pages run short the most recently admitted
  request is preempted (its pages freed, back to the front of the queue; it is re-prefilled
  later from its prompt plus its output so far). A request that cannot fit even alone is
  rejected with a clear error rather than preempting forever.

With the prefix cache on (``engine.prefix_cache``), admission looks each context up: the
request's row starts with the cached pages (shared, read-only) and its prefill runs only
over the rest (the worker reads the row's length as the prefill's prefix). Reviving a
cached-free page takes it out of what allocations may evict, so admission counts it
against the free pages as it counts the pages the prefill will allocate. Preemption and
finishing drop the request's references only: pages other requests share stay theirs.
"""

from __future__ import annotations

import collections
import dataclasses

from eagle_hal.engine.page_allocator import RequestTokenTable
from eagle_hal.engine.request import FinishReason, Request, RequestStatus

__all__ = ["DecodeWork", "PrefillWork", "Scheduler", "SchedulerConfig"]


@dataclasses.dataclass(frozen=True, slots=True)
class SchedulerConfig:
    max_batch_size: int = 16
    max_prefill_tokens: int = 4096  # token budget of one prefill batch
    max_context: int = 2048
    # While requests decode, admit waiting ones only once this many (or every waiting one,
    # when fewer wait) fit at once: each prefill step pauses decoding, so throughput-bound
    # batch work (self-distillation) prefers few large prefills. 1 = admit at once.
    min_admit: int = 1

    def __post_init__(self) -> None:
        if self.max_batch_size < 1 or self.max_prefill_tokens < 1 or self.max_context < 2:
            raise ValueError("max_batch_size, max_prefill_tokens >= 1 and max_context >= 2")
        if not 1 <= self.min_admit <= self.max_batch_size:
            raise ValueError(
                f"min_admit must lie in 1..max_batch_size ({self.max_batch_size}), "
                f"got {self.min_admit}"
            )


@dataclasses.dataclass(frozen=True, slots=True)
class PrefillWork:
    requests: tuple[Request, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class DecodeWork:
    requests: tuple[Request, ...]


class Scheduler:
    """Request queue and admission over one ``RequestTokenTable``."""

    def __init__(self, config: SchedulerConfig, table: RequestTokenTable) -> None:
        self.config = config
        self.table = table
        self.waiting: collections.deque[Request] = collections.deque()
        self.running: list[Request] = []
        self.rejected: list[Request] = []  # finished with an error; the engine reports them
        self._scopes: dict[int, str | bytes | None] = {}  # request id -> prefix-cache scope

    # -- queue -----------------------------------------------------------------------------

    def add(self, request: Request, cache_scope: str | bytes | None = None) -> None:
        """Queue ``request``; ``cache_scope``: the prefix-cache scope it may hit and publish
        in (requests of different scopes never share pages)."""
        request.status = RequestStatus.WAITING
        if cache_scope is not None:
            self._scopes[request.request_id] = cache_scope
        self.waiting.append(request)

    def has_work(self) -> bool:
        return bool(self.waiting or self.running)

    @staticmethod
    def context_ids(request: Request) -> list[int]:
        """Tokens a (re-)prefill runs over: the prompt, plus all output but the pending root."""
        return request.all_ids[:-1] if request.output_ids else list(request.prompt_ids)

    # -- scheduling ------------------------------------------------------------------------

    def schedule(self, headroom: int) -> PrefillWork | DecodeWork | None:
        """The next piece of work; ``headroom`` is the positions one decode iteration may
        reserve past a request's cached length."""
        prefill = self._admit(headroom)
        if prefill:
            return PrefillWork(tuple(prefill))
        if not self.running:
            return None
        self._ensure_headroom(headroom)
        return DecodeWork(tuple(self.running)) if self.running else None

    def _admit(self, headroom: int) -> list[Request]:
        admitted: list[Request] = []
        free = self.config.max_batch_size - len(self.running)
        if self.running and free < min(self.config.min_admit, len(self.waiting)):
            return admitted  # let slots accumulate; decoding goes on
        budget = self.config.max_prefill_tokens
        committed = 0  # pages the requests admitted in this call will take
        while self.waiting and len(self.running) < self.config.max_batch_size:
            request = self.waiting[0]
            context = self.context_ids(request)
            tokens = len(context)
            scope = self._scopes.get(request.request_id)
            hit = self.table.match_prefix(context, scope)
            computed = tokens - len(hit) * self.table.page_size  # what the prefill runs over
            if admitted and computed > budget:
                break
            if tokens + 1 > self.config.max_context:
                self.waiting.popleft()
                self._reject(
                    request,
                    f"request needs {tokens + 1} context positions (its prompt and output "
                    f"and one token more) but the engine's context is {self.config.max_context}",
                )
                continue
            # one iteration's headroom, where the context has it: near its end the worker
            # speculates only as deep as the context allows
            need = min(tokens + 1 + headroom, self.config.max_context)
            if not self.table.can_add_request():
                break
            pages = -(-need // self.table.page_size)
            cache = self.table.prefix_cache
            revived = sum(1 for p in hit if cache is not None and cache.is_idle(p))
            if not self.table.allocator.can_allocate(committed + pages - len(hit) + revived):
                if not self.running and not admitted and pages > self.table.allocator.num_pages - 1:
                    self.waiting.popleft()
                    self._reject(
                        request,
                        f"request needs {pages} KV pages but the whole cache holds "
                        f"{self.table.allocator.num_pages - 1}; give the KV cache more memory",
                    )
                    continue
                break
            self.waiting.popleft()
            request.table_row = self.table.add_request(scope)
            self.table.attach_prefix(request.table_row, hit, tokens)
            request.cached_len = 0  # the prefill sets it (from the row's length)
            request.status = RequestStatus.RUNNING
            self.running.append(request)
            admitted.append(request)
            budget -= computed
            committed += pages - len(hit)
        return admitted

    def _ensure_headroom(self, headroom: int) -> None:
        """Preempt the newest running requests until all of them together can grow by
        ``headroom`` (the pages of one decode iteration for the whole batch)."""
        while self.running:
            if self.can_grow(headroom):
                return
            if len(self.running) == 1:
                victim = self.running[0]
                self.finish(victim, FinishReason.ERROR)
                victim.error = (
                    "KV cache exhausted: this request alone needs more pages than the cache "
                    "holds; give the KV cache more memory or lower max_tokens"
                )
                self.rejected.append(victim)
                return
            self.preempt(self.running[-1])

    def can_grow(self, headroom: int) -> bool:
        """Whether every running request can grow by ``headroom`` without preempting."""
        return self._pages_to_grow(headroom) <= self.table.allocator.num_free_pages

    def _pages_to_grow(self, headroom: int) -> int:
        total = 0
        for request in self.running:
            assert request.table_row is not None
            new_len = min(request.cached_len + headroom, self.config.max_context)
            total += self.table.pages_needed(request.table_row, new_len)
        return total

    # -- lifecycle -------------------------------------------------------------------------

    def preempt(self, request: Request) -> None:
        """Free ``request``'s pages and put it back at the front of the queue."""
        self._release(request)
        request.stats.preemptions += 1
        request.status = RequestStatus.WAITING
        self.running.remove(request)
        self.waiting.appendleft(request)

    def finish(self, request: Request, reason: FinishReason) -> None:
        """Mark ``request`` finished and free everything it holds (idempotent)."""
        if request in self.running:
            self.running.remove(request)
        elif request in self.waiting:
            self.waiting.remove(request)
        self._release(request)
        self._scopes.pop(request.request_id, None)
        request.status = RequestStatus.FINISHED
        if request.finish_reason is None:
            request.finish_reason = reason

    def _reject(self, request: Request, message: str) -> None:
        self._scopes.pop(request.request_id, None)
        request.error = message
        request.status = RequestStatus.FINISHED
        request.finish_reason = FinishReason.ERROR
        self.rejected.append(request)

    def _release(self, request: Request) -> None:
        if request.table_row is not None:
            self.table.release(request.table_row)
            request.table_row = None
        request.cached_len = 0
