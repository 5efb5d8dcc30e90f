"""Appending emitted tokens to a request: EOS, stop token ids, stop strings, length.

A speculative iteration emits several tokens at once; they are appended one by one so that a
stop inside an accepted path cuts the output exactly where plain decoding would have stopped.

Conventions (the same for speculative and plain decoding):

* a stop token id (EOS included unless ``ignore_eos``) ends the request and is not part of
  the output;
* a stop string ends the request; the token that completed it stays in ``output_ids`` but
  the text is cut before the stop string;
* ``max_tokens`` ends the request with ``FinishReason.LENGTH``.

The text grows incrementally: each new token decodes a short window of ids with and without
it (the difference is the new text, so tokenizers that drop a leading space at the start
of a decode still space right), held back while the window's tail is an incomplete UTF-8
sequence. Decoding the whole output at every token would cost time growing with its length,
per request and token. (A stream that keeps ending inside a character -- bytes that are
not valid UTF-8 -- holds its window open, and its cost grows back to that.) A finished
request's text is flushed (``finish_text``), so it equals the decode of its output ids, cut
before a stop string.

``SamplingParams.skip_special_tokens`` reaches the detokenizer as its
``skip_special_tokens`` keyword, where its ``decode`` takes one (a decoder without it
decodes every id). The logprobs the worker left for the emitted tokens
(``Request.pending_logprobs``) follow the tokens appended, one entry per output id.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Protocol

from eagle_hal.engine.request import FinishReason, Request

__all__ = ["Detokenizer", "append_tokens", "finish_text", "safe_stream_text"]


class Detokenizer(Protocol):
    """``decode(token_ids)``; one that takes ``skip_special_tokens=`` gets the request's."""

    def decode(self, token_ids: Sequence[int]) -> str: ...


_INCOMPLETE = "\ufffd"  # what a byte-level tokenizer yields for a partial UTF-8 sequence


def append_tokens(
    request: Request, tokens: Sequence[int], detokenizer: Detokenizer | None
) -> int:
    """Append ``tokens`` to ``request`` until one of them finishes it.

    Returns how many of ``tokens`` were consumed (appended or recognised as the stop token);
    sets ``request.finish_reason`` when the request is done. The caller marks it finished
    and frees its resources.
    """
    stop_ids = request.stop_token_set()
    stops = request.params.stop
    longest_stop = max(map(len, stops)) if stops else 0
    pending, request.pending_logprobs = request.pending_logprobs, []
    consumed = 0
    for token in tokens:
        consumed += 1
        if token in stop_ids:
            request.finish_reason = FinishReason.STOP
            break
        request.output_ids.append(token)
        if consumed <= len(pending):
            request.logprobs.append(pending[consumed - 1])
        if detokenizer is not None:
            previous = len(request.text)
            held = _extend_text(request, detokenizer, final=False)
            if stops:
                # held-back text counts: a stop string may end just before a partial
                # character, and must stop the request at this token
                visible = request.text + held
                cut = _find_stop(visible, stops, max(0, previous - longest_stop))
                if cut is not None:
                    request.text = visible[:cut]
                    request.text_window = request.num_detokenized = len(request.output_ids)
                    request.finish_reason = FinishReason.STOP
                    break
        if len(request.output_ids) >= request.params.max_tokens:
            request.finish_reason = FinishReason.LENGTH
            break
    if request.finish_reason is not None:
        finish_text(request, detokenizer)
    return consumed


def finish_text(request: Request, detokenizer: Detokenizer | None) -> None:
    """Add the text still held back (an incomplete UTF-8 tail decodes as U+FFFD) to a
    request that has finished; nothing after a stop string (the held-back text was
    searched for stop strings as its tokens came)."""
    if detokenizer is not None:
        _extend_text(request, detokenizer, final=True)


def _extend_text(request: Request, detokenizer: Detokenizer, *, final: bool) -> str:
    """Append the text of the output ids not yet in ``request.text``, decoding only the
    window since the last emission (see the module docstring); return the text held back
    (``""`` when none). A decoder whose window decode does not extend the decode without
    the new ids (one that rewrites text across the window's start) gets the whole output
    decoded instead."""
    ids = request.output_ids
    start, end = request.text_window, request.num_detokenized
    if end == len(ids):
        return ""
    decode = _decoder(detokenizer, request.params.skip_special_tokens)
    before = decode(ids[start:end]) if end > start else ""
    after = decode(ids[start:])
    if not after.startswith(before):
        request.text = decode(ids)
        request.text_window = request.num_detokenized = len(ids)
        return ""
    new = after[len(before) :]
    if not new or (new.endswith(_INCOMPLETE) and not final):
        return new
    request.text += new
    request.text_window, request.num_detokenized = end, len(ids)
    return ""


_TAKES_SKIP: dict[type, bool] = {}


def _decoder(detokenizer: Detokenizer, skip_special_tokens: bool):
    """``detokenizer.decode`` with the request's ``skip_special_tokens``, where it takes
    the keyword (asked once per detokenizer type)."""
    kind = type(detokenizer)
    takes = _TAKES_SKIP.get(kind)
    if takes is None:
        try:
            takes = "skip_special_tokens" in inspect.signature(detokenizer.decode).parameters
        except (TypeError, ValueError):  # a builtin without a signature
            takes = False
        _TAKES_SKIP[kind] = takes
    if not takes:
        return detokenizer.decode
    return lambda ids: detokenizer.decode(ids, skip_special_tokens=skip_special_tokens)


def _find_stop(text: str, stops: Sequence[str], start: int) -> int | None:
    positions = [p for p in (text.find(s, start) for s in stops) if p >= 0]
    return min(positions) if positions else None


def safe_stream_text(request: Request) -> str:
    """The part of the request's text that is safe to stream now.

    Text ending in an incomplete UTF-8 sequence, or that could still turn into a stop string,
    is held back until the next token settles it.
    """
    text = request.text
    if request.finish_reason is None:
        while text.endswith(_INCOMPLETE):
            text = text[:-1]
        for stop in request.params.stop:
            for k in range(min(len(stop) - 1, len(text)), 0, -1):
                if text.endswith(stop[:k]):
                    text = text[:-k]
                    break
    return text
