"""Appending emitted tokens to a request: EOS, stop token ids, stop strings, length.

A speculative iteration emits several tokens at once; they are appended one by one so that a
stop inside an accepted path cuts the output exactly where plain decoding would have stopped.

Conventions (the same for speculative and plain decoding):

* a stop token id (EOS included unless ``ignore_eos``) ends the request and is not part of
  the output;
* a stop string ends the request; the token that completed it stays in ``output_ids`` but
  the text is cut before the stop string;
* ``max_new_tokens`` ends the request with ``FinishReason.LENGTH``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from eagle_hal.engine.request import FinishReason, Request

__all__ = ["Detokenizer", "append_tokens", "safe_stream_text"]


class Detokenizer(Protocol):
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
    longest_stop = max((len(s) for s in stops), default=0)
    consumed = 0
    for token in tokens:
        consumed += 1
        if token in stop_ids:
            request.finish_reason = FinishReason.STOP
            break
        request.output_ids.append(token)
        if detokenizer is not None:
            previous = len(request.text)
            request.text = detokenizer.decode(request.output_ids)
            if stops:
                window_start = max(0, previous - longest_stop)
                cut = _find_stop(request.text, stops, window_start)
                if cut is not None:
                    request.text = request.text[:cut]
                    request.finish_reason = FinishReason.STOP
                    break
        if len(request.output_ids) >= request.params.max_new_tokens:
            request.finish_reason = FinishReason.LENGTH
            break
    return consumed


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
