"""skip_special_tokens reaches the detokenizer: the text leaves the special tokens out
(or keeps them), the token ids keep them either way."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from eagle_hal.engine.request import Request, SamplingParams
from eagle_hal.engine.stopping import append_tokens, finish_text

WORDS = {1: "a", 2: "b", 3: "<|im_end|>", 4: " c"}
SPECIAL = {3}


class SpecialAware:
    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return "".join(WORDS[t] for t in token_ids if not (skip_special_tokens and t in SPECIAL))


class Plain:
    def decode(self, token_ids: Sequence[int]) -> str:
        return "".join(WORDS[t] for t in token_ids)


@pytest.mark.parametrize(("skip", "text"), [(True, "ab c"), (False, "a<|im_end|>b c")])
def test_the_text_follows_skip_special_tokens(skip, text):
    request = Request(0, [1], SamplingParams(max_tokens=10, skip_special_tokens=skip))
    for token in (1, 3, 2, 4):  # one at a time, as decode steps append them
        append_tokens(request, [token], SpecialAware())
    finish_text(request, SpecialAware())
    assert request.text == text
    assert request.output_ids == [1, 3, 2, 4]


def test_a_decoder_without_the_keyword_decodes_every_id():
    request = Request(0, [1], SamplingParams(max_tokens=10))
    append_tokens(request, [1, 3, 2], Plain())
    finish_text(request, Plain())
    assert request.text == "a<|im_end|>b"
