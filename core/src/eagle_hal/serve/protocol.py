"""The OpenAI wire format of the responses: response objects, stream chunks, finish
reasons and log probabilities, from what the engine returns (``serve.parsing`` parses the
requests).

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
from collections.abc import Sequence
from typing import Any

from eagle_hal.engine.request import FinishReason, RequestOutput
from eagle_hal.serve.parsing import ParsedRequest

__all__ = [
    "FINISH_DETAIL",
    "ChoiceResult",
    "completion_chunk",
    "completion_response",
    "finish_reasons",
    "logprobs_object",
    "new_id",
    "token_logprobs",
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


def finish_reasons(reason: FinishReason) -> tuple[str, str]:
    """OpenAI's ``finish_reason`` for ``reason``, and the precise one (the extension
    field's value)."""
    return _OPENAI_FINISH[reason], reason.value


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
