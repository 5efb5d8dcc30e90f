"""One OpenAI request body onto ``SamplingParams``: each request field lands in the field
of its name.

OpenAI's defaults apply where they differ from the library's: ``temperature`` 1.0, and
``max_tokens`` 16 for a completion (a chat completion without one runs until EOS, a stop,
or the end of the context). The library's own checks (``InvalidArgument``) become 400s
naming the request's field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from eagle_hal.engine.request import SamplingParams
from eagle_hal.errors import InvalidArgument
from eagle_hal.serve.errors import bad_request, from_invalid_argument
from eagle_hal.serve.limits import RequestLimits
from eagle_hal.validation import MAX_COUNT, check_int

__all__ = [
    "LogprobRequest",
    "choice_seeds",
    "logprob_request",
    "to_sampling_params",
]

SEED_MODULUS = 2**63  # SamplingParams takes seeds in [0, 2**63 - 1]

# request fields that map onto the SamplingParams field of their name, when given
_DIRECT = ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
           "skip_special_tokens")


@dataclasses.dataclass(frozen=True, slots=True)
class LogprobRequest:
    """What a request asks of log probabilities: none (``None`` for the whole object),
    or the chosen token's and ``top`` alternatives per position."""

    top: int


def to_sampling_params(
    body: Mapping[str, Any],
    *,
    chat: bool,
    max_tokens: int,
    seed: int | None,
    limits: RequestLimits,
    logprobs: LogprobRequest | None = None,
) -> SamplingParams:
    """``SamplingParams`` for one choice of the request ``body``. ``max_tokens``: the token
    budget already checked against the context (``protocol``); ``seed``: this choice's
    (derived from the request's for ``n`` > 1); ``logprobs``: the request's
    (``logprob_request``). Raises ``serve.errors.APIError`` (400)."""
    kwargs: dict[str, Any] = {
        "temperature": _value(body, "temperature", 1.0),
        "top_p": _value(body, "top_p", 1.0),
        "seed": seed,
        "ignore_eos": _value(body, "ignore_eos", False),
        "stop": _stops(body, limits),
        "stop_token_ids": _int_list(body, "stop_token_ids"),
        "max_tokens": max_tokens,
    }
    top_k = _value(body, "top_k", 0)
    kwargs["top_k"] = 0 if top_k == -1 else top_k  # vLLM's -1: no cut
    for name in _DIRECT:
        if body.get(name) is not None:
            kwargs[name] = body[name]
    if body.get("logit_bias") is not None:
        kwargs["logit_bias"] = _logit_bias(body["logit_bias"], limits)
    if logprobs is not None:
        kwargs["logprobs"] = logprobs.top
    try:
        return SamplingParams(**kwargs)
    except InvalidArgument as bad:
        raise from_invalid_argument(bad, _request_name(bad.name)) from None
    except TypeError as bad:  # a value of the wrong type for a field SamplingParams converts
        raise bad_request(None, f"invalid sampling parameters: {bad}") from None


def logprob_request(body: Mapping[str, Any], *, chat: bool,
                    limits: RequestLimits) -> LogprobRequest | None:
    """The request's ``logprobs`` ask: a chat's ``logprobs: true`` with ``top_logprobs``
    (0 to the cap), or a completion's ``logprobs: N`` (N alternatives); ``None``: none."""
    if chat:
        wanted = body.get("logprobs")
        if wanted is None or wanted is False:
            if body.get("top_logprobs") not in (None, 0):
                raise bad_request("top_logprobs", "top_logprobs needs logprobs: true")
            return None
        if wanted is not True:
            raise bad_request("logprobs", f"logprobs={wanted!r} is not valid: expected a boolean")
        top = body.get("top_logprobs") or 0
        return LogprobRequest(_count("top_logprobs", top, limits.max_top_logprobs))
    wanted = body.get("logprobs")
    if wanted is None:
        return None
    return LogprobRequest(_count("logprobs", wanted, limits.max_top_logprobs))


def _request_name(field: str) -> str:
    """The request's name of a ``SamplingParams`` field."""
    if field in ("max_new_tokens", "max_tokens"):
        return "max_tokens"
    return field


def _value(body: Mapping[str, Any], name: str, default: Any) -> Any:
    value = body.get(name)
    return default if value is None else value


def _count(name: str, value: Any, cap: int) -> int:
    try:
        return check_int(name, value, high=cap)
    except InvalidArgument as bad:
        raise from_invalid_argument(bad) from None


def _stops(body: Mapping[str, Any], limits: RequestLimits) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise bad_request("stop", "stop must be a non-empty string or a list of them")
    if len(stops) > limits.max_stop:
        raise bad_request("stop", f"{len(stops)} stop strings; at most {limits.max_stop} "
                          "are allowed", code="too_many_stop_strings")
    for text in stops:
        if len(text) > limits.max_stop_chars:
            raise bad_request("stop", f"a stop string of {len(text)} characters; at most "
                              f"{limits.max_stop_chars} are allowed", code="stop_too_long")
    return tuple(stops)


def _int_list(body: Mapping[str, Any], name: str) -> tuple[int, ...]:
    values = body.get(name)
    if values is None:
        return ()
    if not isinstance(values, list):
        raise bad_request(name, f"{name} must be a list of token ids")
    return tuple(_count(name, v, MAX_COUNT) for v in values)


def _logit_bias(value: Any, limits: RequestLimits) -> dict[int, float]:
    """``logit_bias`` ({"token id": bias}) with integer keys; entries capped."""
    if not isinstance(value, dict):
        raise bad_request("logit_bias", "logit_bias must be an object of token id: bias")
    if len(value) > limits.max_logit_bias:
        raise bad_request("logit_bias", f"{len(value)} logit_bias entries; at most "
                          f"{limits.max_logit_bias} are allowed", code="too_many_logit_bias")
    out: dict[int, float] = {}
    for key, bias in value.items():
        try:
            token = int(key)
        except (TypeError, ValueError):
            raise bad_request("logit_bias", f"logit_bias key {key!r} is not a token id") from None
        if isinstance(bias, bool) or not isinstance(bias, int | float) or not -100 <= bias <= 100:
            raise bad_request("logit_bias", f"logit_bias[{key!r}]={bias!r}: expected a number "
                              "in [-100, 100]")
        out[token] = float(bias)
    return out


def choice_seeds(seed: Any, n: int) -> list[int | None]:
    """Each of ``n`` choices' seed: the request's, then the following ones, so that the
    choices differ and the request stays reproducible; ``None`` each without one."""
    if seed is None:
        return [None] * n
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise bad_request("seed", f"seed={seed!r} is not valid: expected an integer")
    if not 0 <= seed < SEED_MODULUS:
        raise bad_request("seed", f"seed={seed!r} is not valid: expected an integer in "
                          f"[0, {SEED_MODULUS - 1}]")
    return [(seed + i) % SEED_MODULUS for i in range(n)]

