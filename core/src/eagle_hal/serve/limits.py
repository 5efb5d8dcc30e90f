"""Per-request caps, checked before a request is admitted to the engine.

A request over any of them is refused with a 400 naming the field (413 for the body), so
that one client cannot hold the batch with a request the server was not sized for. The
defaults follow OpenAI's own limits where it documents one (4 stop strings, 300
``logit_bias`` entries, 20 ``top_logprobs``); ``max_tokens`` is also capped by what the
context leaves: ``prompt + max_tokens <= max_context``.
"""

from __future__ import annotations

import dataclasses

from eagle_hal.validation import check_positive_int

__all__ = ["RequestLimits"]


@dataclasses.dataclass(frozen=True, slots=True)
class RequestLimits:
    """``max_body_bytes``: the request body (413 past it); ``max_n``: choices a request
    (``n`` times the prompts of a completion); ``max_tokens``: tokens a choice may ask for
    (besides the context's own bound); ``max_stop`` / ``max_stop_chars``: stop strings
    and the length of each; ``max_logit_bias`` / ``max_top_logprobs``: entries of those
    fields; ``max_prompts``: prompts of one completion request."""

    max_body_bytes: int = 1 << 20
    max_n: int = 16
    max_tokens: int = 1 << 16
    max_stop: int = 4
    max_stop_chars: int = 256
    max_logit_bias: int = 300
    max_top_logprobs: int = 20
    max_prompts: int = 64

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            check_positive_int(f"--{field.name.replace('_', '-')}", getattr(self, field.name))
