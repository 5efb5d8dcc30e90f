"""Requests as the engine sees them: sampling settings, lifecycle state, outputs, statistics.

Nothing here touches tensors; the runner turns requests into tensors.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from eagle_hal.errors import InvalidArgument
from eagle_hal.validation import (
    check_choice,
    check_float,
    check_int,
    check_optional_int,
    check_positive_int,
)

__all__ = [
    "LOGIT_BIAS_LIMIT",
    "LOGPROBS_MODES",
    "MAX_LOGPROBS",
    "FinishReason",
    "Request",
    "RequestOutput",
    "RequestStats",
    "RequestStatus",
    "SamplingParams",
    "StreamDelta",
    "TokenLogprobs",
]


MAX_LOGPROBS = 20  # top logprobs per token at most (OpenAI's top_logprobs limit)
LOGIT_BIAS_LIMIT = 100.0  # a logit bias is clamped into [-100, 100], as OpenAI does
LOGPROBS_MODES = ("processed", "raw")


@dataclasses.dataclass(frozen=True, slots=True)
class SamplingParams:
    """How to sample one request, with vLLM's and OpenAI's names and ranges.

    ``temperature == 0`` is greedy: the argmax of the logits after ``logit_bias`` and the
    penalties (top-k, top-p and min-p cannot change the argmax). The logits of each
    position go through, in this order: ``logit_bias`` (added), ``repetition_penalty``
    (a token seen in the prompt or the output has a positive logit divided by it, a
    negative one multiplied), ``frequency_penalty`` (times the token's count in the
    output, subtracted) and ``presence_penalty`` (subtracted once the token is in the
    output), then ``temperature``, ``top_k``, ``top_p`` and ``min_p`` (tokens whose
    probability is below ``min_p`` times the most likely one's are dropped). Speculative
    decoding samples every position from exactly that distribution.

    ``top_k``: ``0`` or ``-1`` (vLLM's "off") keeps every token; ``-1`` is stored as ``0``.
    ``max_tokens``: the output's token budget. ``max_new_tokens`` is its former name,
    accepted with a ``DeprecationWarning`` (both given and different: ``InvalidArgument``).
    ``logit_bias``: token id -> bias, each clamped into [-100, 100]; keys may be ints or
    decimal strings (as a JSON body has them). ``logprobs``: ``None`` for none, else how
    many top logprobs each output token carries besides its own (``0``: only the sampled
    token's); ``logprobs_mode`` ``"processed"`` reads them from the distribution sampled
    (at temperature 0: the processed logits at temperature 1 with the top-k/top-p/min-p
    cuts), ``"raw"`` from the log-softmax of the model's logits. ``skip_special_tokens``:
    the output text leaves out the tokenizer's special tokens (the token ids keep them).
    """

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or -1): no top-k cut
    seed: int | None = None
    max_tokens: int = 128
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    min_p: float = 0.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    # token id -> bias; not hashed (a dict), compared by value
    logit_bias: dict[int, float] | None = dataclasses.field(default=None, hash=False)
    logprobs: int | None = None
    logprobs_mode: str = "processed"
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        # InvalidArgument (a ValueError) naming the field; NaN and infinities never pass
        set_field = functools.partial(object.__setattr__, self)
        set_field("temperature", check_float("temperature", self.temperature, low=0.0))
        set_field("top_p", check_float("top_p", self.top_p, low=0.0, high=1.0, low_open=True))
        top_k = check_int("top_k", self.top_k, low=-1, meaning="0 or -1 disables it")
        set_field("top_k", max(top_k, 0))
        check_optional_int("seed", self.seed, high=2**63 - 1, meaning="or None for a fresh one")
        check_positive_int("max_tokens", self.max_tokens)
        if isinstance(self.stop, str):
            set_field("stop", (self.stop,))
        set_field("stop", tuple(self.stop))
        set_field("stop_token_ids", tuple(self.stop_token_ids))
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidArgument("stop", self.stop, "non-empty strings")
        for token in self.stop_token_ids:
            check_int("stop_token_ids", token)
        _check_bool("ignore_eos", self.ignore_eos)
        set_field("min_p", check_float("min_p", self.min_p, low=0.0, high=1.0))
        for name in ("presence_penalty", "frequency_penalty"):
            set_field(name, check_float(name, getattr(self, name), low=-2.0, high=2.0))
        set_field("repetition_penalty", check_float(
            "repetition_penalty", self.repetition_penalty, low=0.0, low_open=True))
        set_field("logit_bias", _check_logit_bias(self.logit_bias))
        check_optional_int("logprobs", self.logprobs, high=MAX_LOGPROBS,
                           meaning="top logprobs per token, 0 for the sampled token's only, "
                           "or None for none")
        check_choice("logprobs_mode", self.logprobs_mode, LOGPROBS_MODES)
        _check_bool("skip_special_tokens", self.skip_special_tokens)

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def max_new_tokens(self) -> int:
        """``max_tokens`` under its former name (deprecated)."""
        warnings.warn("SamplingParams.max_new_tokens is deprecated: use max_tokens",
                      DeprecationWarning, stacklevel=2)
        return self.max_tokens

    @property
    def processes_logits(self) -> bool:
        """Whether the logits change before temperature: a logit bias or a penalty
        (``speculative.logits_processing``)."""
        return bool(self.logit_bias) or self.presence_penalty != 0.0 or (
            self.frequency_penalty != 0.0) or self.repetition_penalty != 1.0

    @property
    def uses_penalties(self) -> bool:
        """Whether a penalty reads the tokens before the position sampled."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or (
            self.repetition_penalty != 1.0)


_UNSET: Any = object()
_fields_init = SamplingParams.__init__


@functools.wraps(_fields_init)
def _init_with_alias(self: SamplingParams, *args: Any, max_new_tokens: Any = _UNSET,
                     **kwargs: Any) -> None:
    """``SamplingParams(max_new_tokens=n)``: the former name of ``max_tokens``, kept for
    one release (a ``DeprecationWarning``; both given and different: ``InvalidArgument``)."""
    if max_new_tokens is not _UNSET:
        warnings.warn("SamplingParams(max_new_tokens=...) is deprecated: use max_tokens",
                      DeprecationWarning, stacklevel=2)
        check_positive_int("max_new_tokens", max_new_tokens)
        position = _MAX_TOKENS_POSITION
        given = args[position] if len(args) > position else kwargs.get("max_tokens", _UNSET)
        if given is not _UNSET and given != max_new_tokens:
            raise InvalidArgument(
                "max_new_tokens", max_new_tokens,
                f"the value of max_tokens ({given!r}) or no value: it is max_tokens' "
                "deprecated name",
            )
        if len(args) <= position:
            kwargs["max_tokens"] = max_new_tokens
    _fields_init(self, *args, **kwargs)


_MAX_TOKENS_POSITION = [f.name for f in dataclasses.fields(SamplingParams)].index("max_tokens")
SamplingParams.__init__ = _init_with_alias  # type: ignore[method-assign]


def _check_bool(name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise InvalidArgument(name, value, "True or False")


def _check_logit_bias(value: Any) -> dict[int, float] | None:
    """``None``, or a mapping token id -> finite bias; ids may be decimal strings (JSON
    keys); each bias is clamped into [-100, 100] as OpenAI does."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise InvalidArgument("logit_bias", value, "a mapping of token id to bias, or None")
    bias: dict[int, float] = {}
    for key, amount in value.items():
        token = key
        if isinstance(key, str) and key.strip().lstrip("-").isdigit():
            token = int(key.strip())
        token = check_int("logit_bias", token, meaning="token ids as keys")
        number = check_float(f"logit_bias[{token}]", amount)
        bias[token] = min(max(number, -LOGIT_BIAS_LIMIT), LOGIT_BIAS_LIMIT)
    return bias or None


class TokenLogprobs(NamedTuple):
    """One output token's logprobs (``SamplingParams.logprobs``): the sampled token's, and
    the ``logprobs`` most likely tokens' as ``(token id, logprob)``, most likely first.
    Tokens the sampled distribution cannot produce (a top-k, top-p or min-p cut) have
    logprob ``-inf`` and are not listed among the top ones."""

    logprob: float
    top: tuple[tuple[int, float], ...] = ()


class RequestStatus(enum.Enum):
    WAITING = "waiting"  # queued, no KV
    RUNNING = "running"  # has KV, decoding
    FINISHED = "finished"


class FinishReason(enum.Enum):
    LENGTH = "length"  # max_tokens reached
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
    # with SamplingParams.logprobs: one entry per output id; the worker leaves those of
    # the tokens it emits in ``pending_logprobs``, and ``append_tokens`` keeps the ones of
    # the tokens it appends
    logprobs: list[TokenLogprobs] = dataclasses.field(default_factory=list)
    pending_logprobs: list[TokenLogprobs] = dataclasses.field(default_factory=list)
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
    # per output token (SamplingParams.logprobs set), else None
    logprobs: tuple[TokenLogprobs, ...] | None = None

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
    # the logprobs of ``token_ids`` (SamplingParams.logprobs set), else None
    logprobs: Sequence[TokenLogprobs] | None = None
