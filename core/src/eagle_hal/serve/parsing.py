"""Request bodies parsed and checked: one ``ParsedRequest`` per HTTP request.

``parse_request`` turns a ``/v1/completions`` or ``/v1/chat/completions`` body into a
``ParsedRequest``: the prompts as token ids, and one ``SamplingParams`` per choice (``n``
per prompt), every cap of ``RequestLimits`` and the context's bound checked, so that
nothing is admitted to the engine that it would refuse. Each request field lands in the
``SamplingParams`` field of its name (``to_sampling_params``), once per token budget: the
choices differ only by their seeds.

OpenAI's defaults apply where they differ from the library's: ``temperature`` 1.0, and
``max_tokens`` 16 for a completion (a chat completion without one runs until EOS, a stop,
or the end of the context). The library's own checks (``InvalidArgument``) become 400s
naming the request's field. ``serve.protocol`` builds the responses.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from eagle_hal.api import PromptTooLong
from eagle_hal.engine.request import SamplingParams
from eagle_hal.errors import EagleHalError, InvalidArgument
from eagle_hal.serve.errors import (
    APIError,
    bad_request,
    from_invalid_argument,
    unsupported_parameter,
)
from eagle_hal.serve.limits import RequestLimits
from eagle_hal.validation import MAX_COUNT, check_int

__all__ = [
    "ChoiceSpec",
    "LogprobRequest",
    "ParsedRequest",
    "choice_seeds",
    "logprob_request",
    "parse_request",
    "to_sampling_params",
]

_ROLES = frozenset({"system", "developer", "user", "assistant"})

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
    budget already checked against the context (``parse_request``); ``seed``: this choice's
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
        return LogprobRequest(_int("top_logprobs", top, high=limits.max_top_logprobs))
    wanted = body.get("logprobs")
    if wanted is None:
        return None
    return LogprobRequest(_int("logprobs", wanted, high=limits.max_top_logprobs))


def _request_name(field: str) -> str:
    """The request's name of a ``SamplingParams`` field."""
    if field in ("max_new_tokens", "max_tokens"):
        return "max_tokens"
    return field


def _value(body: Mapping[str, Any], name: str, default: Any) -> Any:
    value = body.get(name)
    return default if value is None else value


def _int(name: str, value: Any, *, low: int = 0, high: int) -> int:
    """``value`` as an integer in ``[low, high]``; a 400 naming ``name`` otherwise."""
    try:
        return check_int(name, value, low=low, high=high)
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
    return tuple(_int(name, v, high=MAX_COUNT) for v in values)


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


class Model(Protocol):
    """What parsing needs of the ``LLM``: encoding and the prompt check."""

    def encode(self, prompt: Any, *, chat: bool = False) -> list[int]: ...

    def check_prompt(self, ids: list[int]) -> None: ...

    @property
    def vocab_size(self) -> int: ...


@dataclasses.dataclass(frozen=True, slots=True)
class ChoiceSpec:
    """One choice to generate: its index in the response, its prompt, its settings."""

    index: int
    prompt_index: int
    params: SamplingParams


@dataclasses.dataclass(frozen=True, slots=True)
class ParsedRequest:
    chat: bool
    model: str
    prompts: list[list[int]]
    choices: list[ChoiceSpec]
    stream: bool
    include_usage: bool
    logprobs: LogprobRequest | None
    return_token_ids: bool = False  # the extension: each choice's (chunk's) token ids

    @property
    def prompt_tokens(self) -> int:
        return sum(len(p) for p in self.prompts)


def parse_request(
    body: Any,
    *,
    chat: bool,
    llm: Model,
    model_names: Sequence[str],
    max_context: int,
    limits: RequestLimits,
) -> ParsedRequest:
    """Check and encode one request body (see the module docstring); ``APIError`` for
    anything refused: 400 naming the field, 404 for a model not served."""
    if not isinstance(body, dict):
        raise bad_request(None, "the request body must be a JSON object", code="invalid_json")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise bad_request("model", "model is required: the name GET /v1/models lists",
                          code="missing_model")
    if model not in model_names:
        raise APIError(404, f"the model {model!r} does not exist; this server serves "
                       f"{', '.join(repr(m) for m in model_names)}", code="model_not_found",
                       param="model")
    _refuse_unsupported(body, chat)
    n = 1 if body.get("n") is None else _int("n", body["n"], low=1, high=limits.max_n)
    stream = body.get("stream") or False
    if not isinstance(stream, bool):
        raise bad_request("stream", f"stream={stream!r} is not valid: expected a boolean")
    options = body.get("stream_options")
    if options is not None and not stream:
        raise bad_request("stream_options", "stream_options needs stream: true")
    options = options or {}
    if not isinstance(options, dict):
        raise bad_request("stream_options", "stream_options must be an object")
    include_usage = bool(options.get("include_usage", False))
    prompts = _encode_messages(body, llm) if chat else _encode_prompts(body, llm, limits)
    if len(prompts) * n > limits.max_n:
        raise bad_request("n", f"{len(prompts)} prompts x n={n} choices; at most "
                          f"{limits.max_n} choices a request are allowed", code="too_many_choices")
    seeds = choice_seeds(body.get("seed"), n * len(prompts))
    logprobs = logprob_request(body, chat=chat, limits=limits)
    # the body is mapped once per token budget; the choices differ only by their seeds
    mapped: dict[int, SamplingParams] = {}
    choices = []
    for p, ids in enumerate(prompts):
        budget = _max_tokens(body, chat, len(ids), max_context, limits)
        if budget not in mapped:
            mapped[budget] = to_sampling_params(body, chat=chat, max_tokens=budget, seed=None,
                                                limits=limits, logprobs=logprobs)
            _check_vocabulary(mapped[budget], llm.vocab_size)
        for i in range(n):
            index = p * n + i
            params = dataclasses.replace(mapped[budget], seed=seeds[index])
            choices.append(ChoiceSpec(index, p, params))
    token_ids = body.get("return_token_ids") or False
    if not isinstance(token_ids, bool):
        raise bad_request("return_token_ids", "return_token_ids must be a boolean")
    return ParsedRequest(chat, model, prompts, choices, stream, include_usage, logprobs,
                         token_ids)


def _check_vocabulary(params: SamplingParams, vocab: int) -> None:
    """Token ids the model does not have, refused as ``LLM.generate`` refuses them."""
    bias = params.logit_bias or {}
    if any(not 0 <= t < vocab for t in bias):
        raise bad_request("logit_bias", f"logit_bias names token ids outside the model's "
                          f"vocabulary [0, {vocab})")
    if any(not 0 <= t < vocab for t in params.stop_token_ids):
        raise bad_request("stop_token_ids", f"stop_token_ids outside the model's "
                          f"vocabulary [0, {vocab})")


def _refuse_unsupported(body: Mapping[str, Any], chat: bool) -> None:
    """Fields this server does not implement, when set to anything but their no-op."""
    if body.get("echo"):
        raise unsupported_parameter("echo")
    if body.get("suffix"):
        raise unsupported_parameter("suffix")
    best_of = body.get("best_of")
    if best_of is not None and best_of != body.get("n", 1):
        raise unsupported_parameter("best_of", "ask for n choices instead")
    for name in ("tools", "functions", "prompt_logprobs", "guided_json", "guided_regex"):
        if body.get(name):
            raise unsupported_parameter(name)
    if body.get("tool_choice") not in (None, "none"):
        raise unsupported_parameter("tool_choice")
    response_format = body.get("response_format")
    if response_format is not None and (
        not isinstance(response_format, dict) or response_format.get("type") != "text"
    ):
        raise unsupported_parameter("response_format", 'only {"type": "text"}')


def _max_tokens(body: Mapping[str, Any], chat: bool, prompt_len: int, max_context: int,
                limits: RequestLimits) -> int:
    """The choice's token budget: asked (``max_completion_tokens`` or ``max_tokens``), with
    ``prompt + max_tokens <= max_context``; or the default: 16 for a completion (OpenAI's),
    none for a chat completion (the cap), which then ends at EOS, a stop, or when the
    context is full."""
    room = max_context - prompt_len
    name = "max_tokens"
    asked = body.get("max_tokens")
    if chat and body.get("max_completion_tokens") is not None:
        name, asked = "max_completion_tokens", body["max_completion_tokens"]
    if asked is None:
        return limits.max_tokens if chat else max(1, min(room, limits.max_tokens, 16))
    asked = _int(name, asked, low=1, high=limits.max_tokens)
    if prompt_len + asked > max_context:
        raise bad_request(name, f"the prompt has {prompt_len} tokens and {name}={asked}: "
                          f"together more than the context of {max_context} tokens; at most "
                          f"{max(room, 0)} fit", code="context_length_exceeded")
    return asked


def _encode_prompts(body: Mapping[str, Any], llm: Model,
                    limits: RequestLimits) -> list[list[int]]:
    prompt = body.get("prompt")
    if prompt is None:
        raise bad_request("prompt", "prompt is required", code="missing_prompt")
    if isinstance(prompt, str) or (
        isinstance(prompt, list) and prompt and all(_is_id(t) for t in prompt)
    ):
        items: list[Any] = [prompt]
    elif isinstance(prompt, list) and prompt:
        items = prompt
    else:
        raise bad_request("prompt", "prompt must be a string, a list of strings, token ids, "
                          "or a list of token id lists")
    if len(items) > limits.max_prompts:
        raise bad_request("prompt", f"{len(items)} prompts; at most {limits.max_prompts} a "
                          "request are allowed", code="too_many_prompts")
    out = []
    for item in items:
        if not isinstance(item, str) and not (isinstance(item, list) and all(map(_is_id, item))):
            raise bad_request("prompt", "each prompt must be a string or a list of token ids")
        out.append(_encoded(llm, item, "prompt", chat=False))
    return out


def _encode_messages(body: Mapping[str, Any], llm: Model) -> list[list[int]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise bad_request("messages", "messages must be a non-empty list of "
                          '{"role", "content"} objects', code="missing_messages")
    plain = []
    for index, message in enumerate(messages):
        where = f"messages[{index}]"
        if not isinstance(message, dict):
            raise bad_request(where, f"{where} must be an object")
        role = message.get("role")
        if role not in _ROLES:
            if role == "tool" or message.get("tool_calls"):
                raise unsupported_parameter(f"{where}.role", "tool messages")
            raise bad_request(f"{where}.role", f"{where}.role={role!r} is not valid: expected "
                              f"one of {', '.join(sorted(_ROLES))}")
        plain.append({"role": "system" if role == "developer" else role,
                      "content": _text_content(message.get("content"), where)})
    return [_encoded(llm, plain, "messages", chat=True)]


def _text_content(content: Any, where: str) -> str:
    """A message's content as text: a string, or text parts joined."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if isinstance(content, list):
        texts = []
        for part in content:
            if not isinstance(part, dict) or part.get("type") != "text" \
                    or not isinstance(part.get("text"), str):
                raise unsupported_parameter(f"{where}.content", "only text content parts")
            texts.append(part["text"])
        return "".join(texts)
    raise bad_request(f"{where}.content", f"{where}.content must be a string or text parts")


def _encoded(llm: Model, prompt: Any, param: str, *, chat: bool) -> list[int]:
    try:
        ids = llm.encode(prompt, chat=chat)
        llm.check_prompt(ids)
    except InvalidArgument as bad:
        raise bad_request(param, str(bad)) from None
    except PromptTooLong as error:
        raise bad_request(param, str(error), code="context_length_exceeded") from None
    except EagleHalError as error:  # no chat template, a template that raises
        raise bad_request(param, str(error), code="invalid_prompt") from None
    return ids


def _is_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
