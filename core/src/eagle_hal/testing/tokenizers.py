"""A tokenizer for tests: detokenisation without a vocabulary file."""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["CharTokenizer"]


class CharTokenizer:
    """Token i is the letter ``chr(97 + i % 26)``: a detokenizer for stop strings."""

    eos_token_ids: tuple[int, ...] = ()

    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(chr(97 + t % 26) for t in token_ids)
