"""The OpenAI wire format: request bodies parsed and checked, responses and stream chunks
built.

``parse_request`` turns a ``/v1/completions`` or ``/v1/chat/completions`` body into a
``ParsedRequest``: the prompts as token ids, and one ``SamplingParams`` per choice (``n``
per prompt), every cap of ``RequestLimits`` and the context's bound checked, so that
nothing is admitted to the engine that it would refuse. The builders below shape what the
engine returns as OpenAI's objects.

Finish reasons: ``stop`` (EOS, a stop token or a stop string) and ``length`` (the token
budget, or the context filled) as OpenAI names them; the precise reason is the choice's
extension field ``eagle_hal_finish_reason`` (``stop``, ``length``, ``context_full``,
``cancelled``). A request with the extension ``"return_token_ids": true`` also gets each
choice's (each chunk's) ``token_ids``.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from eagle_hal.api import PromptTooLong
from eagle_hal.engine.request import FinishReason, RequestOutput, SamplingParams
from eagle_hal.errors import EagleHalError, InvalidArgument
from eagle_hal.serve.errors import (
    APIError,
    bad_request,
    from_invalid_argument,
    unsupported_parameter,
)
from eagle_hal.serve.limits import RequestLimits
from eagle_hal.serve.sampling import (
    LogprobRequest,
    choice_seeds,
    logprob_request,
    to_sampling_params,
)
from eagle_hal.validation import check_int

__all__ = [
    "FINISH_DETAIL",
    "ChoiceResult",
    "ParsedRequest",
    "completion_chunk",
    "completion_response",
    "finish_reasons",
    "parse_request",
    "usage",
]

#: the choice's extension field naming the precise finish reason
FINISH_DETAIL = "eagle_hal_finish_reason"

_OPENAI_FINISH = {
    FinishReason.STOP: "stop",
    FinishReason.LENGTH: "length",
    FinishReason.CONTEXT_FULL: "length",
    FinishReason.CANCELLED: "abort",
    FinishReason.ERROR: "error",
}
_ROLES = frozenset({"system", "developer", "user", "assistant"})


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


def finish_reasons(reason: FinishReason) -> tuple[str, str]:
    """OpenAI's ``finish_reason`` for ``reason``, and the precise one (the extension
    field's value)."""
    return _OPENAI_FINISH[reason], reason.value


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
    n = _count(body, "n", 1, limits.max_n)
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


def _count(body: Mapping[str, Any], name: str, default: int, cap: int) -> int:
    value = body.get(name)
    if value is None:
        return default
    try:
        return check_int(name, value, low=1, high=cap)
    except InvalidArgument as bad:
        raise from_invalid_argument(bad) from None


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
    try:
        asked = check_int(name, asked, low=1, high=limits.max_tokens)
    except InvalidArgument as bad:
        raise from_invalid_argument(bad) from None
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


# -- responses --------------------------------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ChoiceResult:
    """One choice as it finished: text, tokens, reason, log probabilities."""

    index: int
    output: RequestOutput
    logprobs: Any = None  # the wire object, built by ``logprobs`` below, or None


def new_id(chat: bool) -> str:
    return f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def completion_response(request: ParsedRequest, response_id: str,
                        results: Sequence[ChoiceResult]) -> dict[str, Any]:
    """The non-streaming response object."""
    choices = []
    for result in sorted(results, key=lambda r: r.index):
        reason, detail = finish_reasons(result.output.finish_reason)
        choice: dict[str, Any] = {"index": result.index}
        if request.chat:
            choice["message"] = {"role": "assistant", "content": result.output.text}
        else:
            choice["text"] = result.output.text
        choice["logprobs"] = result.logprobs
        if request.return_token_ids:
            choice["token_ids"] = list(result.output.token_ids)
        choice["finish_reason"] = reason
        choice[FINISH_DETAIL] = detail
        choices.append(choice)
    completion = sum(len(r.output.token_ids) for r in results)
    return {
        "id": response_id,
        "object": "chat.completion" if request.chat else "text_completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": choices,
        "usage": usage(request.prompt_tokens, completion),
    }


def completion_chunk(request: ParsedRequest, response_id: str, created: int, *,
                     index: int | None = None, text: str | None = None, role: bool = False,
                     reason: FinishReason | None = None, logprobs: Any = None,
                     token_ids: Sequence[int] | None = None,
                     usage_now: dict[str, int] | None = None) -> dict[str, Any]:
    """One stream chunk: a choice's new text (``index``), or with ``index`` ``None`` the
    closing chunk carrying only ``usage``."""
    chunk: dict[str, Any] = {
        "id": response_id,
        "object": "chat.completion.chunk" if request.chat else "text_completion",
        "created": created,
        "model": request.model,
        "choices": [],
    }
    if index is not None:
        choice: dict[str, Any] = {"index": index}
        if request.chat:
            delta: dict[str, Any] = {"role": "assistant"} if role else {}
            if text is not None:
                delta["content"] = text
            choice["delta"] = delta
        else:
            choice["text"] = text or ""
        choice["logprobs"] = logprobs
        if request.return_token_ids and token_ids is not None:
            choice["token_ids"] = list(token_ids)
        if reason is None:
            choice["finish_reason"] = None
        else:
            choice["finish_reason"], choice[FINISH_DETAIL] = finish_reasons(reason)
        chunk["choices"].append(choice)
    if request.include_usage:
        chunk["usage"] = usage_now
    return chunk


# -- log probabilities ------------------------------------------------------------------------


def token_logprobs(source: Any) -> list[tuple[int, float, list[tuple[int, float]]]] | None:
    """The log probabilities an engine output or delta carries (``source.logprobs``, one
    ``engine.request.TokenLogprobs`` per token of ``source.token_ids``), as (token id, log
    probability, [(alternative id, log probability), ...]) per token; ``None`` when it
    carries none."""
    entries = source.logprobs
    if entries is None:
        return None
    return [(int(token), float(entry.logprob), [(int(t), float(lp)) for t, lp in entry.top])
            for token, entry in zip(source.token_ids, entries, strict=False)]


def logprobs_object(entries: list[tuple[int, float, list[tuple[int, float]]]] | None,
                    decode: Any, *, chat: bool, top: int, offset: int = 0) -> Any:
    """OpenAI's ``logprobs`` of a choice (or of a chunk): a chat's ``{"content": [...]}``,
    a completion's parallel lists. ``decode`` turns a token id into its text."""
    if entries is None:
        return None
    if chat:
        content = []
        for token, logprob, alternatives in entries:
            text = decode(token)
            content.append({
                "token": text, "logprob": logprob, "bytes": list(text.encode()),
                "top_logprobs": [{"token": decode(t), "logprob": lp,
                                  "bytes": list(decode(t).encode())}
                                 for t, lp in alternatives[:top]],
            })
        return {"content": content}
    tokens, offsets, position = [], [], offset
    for token, _, _ in entries:
        text = decode(token)
        tokens.append(text)
        offsets.append(position)
        position += len(text)
    return {
        "tokens": tokens,
        "token_logprobs": [lp for _, lp, _ in entries],
        "top_logprobs": [{decode(t): lp for t, lp in alternatives[:top]}
                         for _, _, alternatives in entries],
        "text_offset": offsets,
    }
