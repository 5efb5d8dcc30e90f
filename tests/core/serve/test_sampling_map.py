"""The one mapping of a request body onto ``SamplingParams`` (``serve.parsing``): each
request field lands in the field of its name, OpenAI's defaults apply, the library's
checks become 400s naming the field."""

from __future__ import annotations

import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.serve import parsing
from eagle_hal.serve.errors import APIError
from eagle_hal.serve.limits import RequestLimits

LIMITS = RequestLimits()


def mapped(body, **kwargs):
    return parsing.to_sampling_params(body, chat=kwargs.pop("chat", False),
                                       max_tokens=kwargs.pop("max_tokens", 7),
                                       seed=kwargs.pop("seed", None), limits=LIMITS,
                                       logprobs=kwargs.pop("logprobs", None))


def test_every_field_lands_by_name():
    body = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "stop": ["x", "yz"],
            "stop_token_ids": [3], "ignore_eos": True, "min_p": 0.1, "presence_penalty": 0.2,
            "frequency_penalty": 0.3, "repetition_penalty": 1.2, "logit_bias": {"4": -1},
            "skip_special_tokens": False}
    params = mapped(body, seed=9, max_tokens=11)
    assert params == SamplingParams(
        temperature=0.7, top_p=0.9, top_k=5, stop=("x", "yz"), stop_token_ids=(3,),
        ignore_eos=True, min_p=0.1, presence_penalty=0.2, frequency_penalty=0.3,
        repetition_penalty=1.2, logit_bias={4: -1.0}, skip_special_tokens=False, seed=9,
        max_tokens=11)
    chat = parsing.logprob_request({"logprobs": True, "top_logprobs": 3}, chat=True,
                                    limits=LIMITS)
    assert mapped({}, logprobs=chat).logprobs == 3
    completion = parsing.logprob_request({"logprobs": 0}, chat=False, limits=LIMITS)
    assert mapped({}, logprobs=completion).logprobs == 0
    assert mapped({}).logprobs is None and mapped({}).skip_special_tokens is True


def test_openai_defaults_and_library_checks():
    params = mapped({})
    assert params.temperature == 1.0 and params.top_p == 1.0  # OpenAI's default temperature
    assert mapped({"top_k": -1}).top_k in (0, -1)  # vLLM's "no cut"
    with pytest.raises(APIError) as caught:
        mapped({"top_p": 1.5})
    assert caught.value.param == "top_p" and caught.value.status == 400
    assert parsing.choice_seeds(5, 3) == [5, 6, 7]
    assert parsing.choice_seeds(2**63 - 1, 2) == [2**63 - 1, 0]
    assert parsing.choice_seeds(None, 2) == [None, None]
    assert isinstance(mapped({}), SamplingParams)
