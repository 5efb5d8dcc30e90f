"""Requests as the engine sees them: sampling settings, lifecycle state, outputs, statistics.

Nothing here touches tensors; the runner turns requests into tensors.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Sequence

from eagle_hal.errors import InvalidArgument
from eagle_hal.validation import (
    check_float,
    check_int,
    check_optional_int,
    check_positive_int,
)

__all__ = [
    "FinishReason",
    "Request",
    "RequestOutput",
    "RequestStats",
    "RequestStatus",
    "SamplingParams",
    "StreamDelta",
]


@dataclasses.dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one request. ``temperature == 0`` is greedy (top-k/top-p ignored)."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    seed: int | None = None
    max_new_tokens: int = 128
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        # InvalidArgument (a ValueError) naming the field; NaN and infinities never pass
        object.__setattr__(self, "temperature", check_float("temperature", self.temperature,
                                                            low=0.0))
        object.__setattr__(self, "top_p", check_float("top_p", self.top_p, low=0.0, high=1.0,
                                                      low_open=True))
        check_int("top_k", self.top_k, meaning="0 disables it")
        check_optional_int("seed", self.seed, high=2**63 - 1, meaning="or None for a fresh one")
        check_positive_int("max_new_tokens", self.max_new_tokens)
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidArgument("stop", self.stop, "non-empty strings")
        for token in self.stop_token_ids:
            check_int("stop_token_ids", token)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, no KV
    RUNNING = "running"  # has KV, decoding
    FINISHED = "finished"


class FinishReason(enum.Enum):
    LENGTH = "length"  # max_new_tokens reached
    # the context is full: max_context holds no further token (an OpenAI client sees
    # "length"; the server names this reason in an extension field)
    CONTEXT_FULL = "context_full"
    STOP = "stop"  # EOS, a stop token id, or a stop string
    CANCELLED = "cancelled"
    ERROR = "error"  # rejected (e.g. could never fit the KV cache)


@dataclasses.dataclass(slots=True)
class RequestStats:
    """Per-request statistics, filled in as the request runs."""

    prompt_tokens: int = 0
    output_tokens: int = 0
    verify_steps: int = 0  # target forwards after prefill (verify or plain decode)
    accepted_tokens: int = 0  # tokens emitted by those forwards, bonus included
    preemptions: int = 0
    arrival_time: float = dataclasses.field(default_factory=time.perf_counter)
    first_token_time: float | None = None
    finish_time: float | None = None

    @property
    def accept_length(self) -> float:
        """Tokens per target verify pass (plain decoding: 1.0)."""
        return self.accepted_tokens / self.verify_steps if self.verify_steps else 0.0

    @property
    def time_to_first_token(self) -> float | None:
        if self.first_token_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def decode_tokens_per_s(self) -> float:
        if self.first_token_time is None or self.finish_time is None:
            return 0.0
        elapsed = self.finish_time - self.first_token_time
        return (self.output_tokens - 1) / elapsed if elapsed > 0 and self.output_tokens > 1 else 0.0


@dataclasses.dataclass(eq=False)
class Request:
    """One generation request and its host-side state."""

    request_id: int
    prompt_ids: list[int]
    params: SamplingParams
    eos_token_ids: tuple[int, ...] = ()
    status: RequestStatus = RequestStatus.WAITING
    output_ids: list[int] = dataclasses.field(default_factory=list)
    finish_reason: FinishReason | None = None
    error: str | None = None
    stats: RequestStats = dataclasses.field(default_factory=RequestStats)
    # KV bookkeeping (owned by the engine while RUNNING)
    table_row: int | None = None
    # tokens whose target KV is cached (the pending root is not); with an iteration in
    # flight (speculative.overlap) one more: the root's KV, whose next token is not read yet
    cached_len: int = 0
    text: str = ""  # decoded output text so far (stop strings are cut from it)
    # incremental detokenisation (``engine.stopping``): the decode window's first output
    # id, and how many output ids have their text in ``text``
    text_window: int = 0
    num_detokenized: int = 0
    streamed_tokens: int = 0
    streamed_chars: int = 0
    _stop_ids: tuple[SamplingParams, tuple[int, ...], frozenset[int]] | None = dataclasses.field(
        default=None, repr=False, compare=False)  # stop_token_set's, with what it came from

    def __post_init__(self) -> None:
        self.stats.prompt_tokens = len(self.prompt_ids)

    @property
    def all_ids(self) -> list[int]:
        return self.prompt_ids + self.output_ids

    @property
    def num_tokens(self) -> int:
        """``len(all_ids)`` without building it."""
        return len(self.prompt_ids) + len(self.output_ids)

    @property
    def finished(self) -> bool:
        return self.status is RequestStatus.FINISHED

    def stop_token_set(self) -> frozenset[int]:
        """The ids that end the request: its stop ids, and EOS unless ``ignore_eos``."""
        cached = self._stop_ids  # asked per request and step: built once per params and EOS
        if cached is None or cached[0] is not self.params or cached[1] is not self.eos_token_ids:
            ids = set(self.params.stop_token_ids)
            if not self.params.ignore_eos:
                ids.update(self.eos_token_ids)
            cached = self._stop_ids = (self.params, self.eos_token_ids, frozenset(ids))
        return cached[2]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestOutput:
    """The result of one finished request."""

    request_id: int
    prompt: str | None
    text: str
    token_ids: tuple[int, ...]
    finish_reason: FinishReason
    stats: RequestStats
    error: str | None = None

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def accept_length(self) -> float:
        return self.stats.accept_length


@dataclasses.dataclass(frozen=True, slots=True)
class StreamDelta:
    """New output of one request since the last delta."""

    request_id: int
    text: str
    token_ids: Sequence[int]
    finished: bool
    finish_reason: FinishReason | None = None
