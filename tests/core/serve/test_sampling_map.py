"""The one mapping of a request body onto ``SamplingParams`` (``serve.sampling``), against
the field list it reads: with a ``SamplingParams`` lacking the newer fields, setting one is
a 400 ``unsupported_parameter`` naming it (its neutral value passes); with the real class,
each request field lands in the field of its name."""

from __future__ import annotations

import dataclasses

import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.serve import sampling
from eagle_hal.serve.errors import APIError
from eagle_hal.serve.limits import RequestLimits

LIMITS = RequestLimits()


@dataclasses.dataclass(frozen=True)
class OldParams:
    """The fields SamplingParams had before the vLLM/OpenAI names."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_new_tokens: int = 128
    stop: tuple = ()
    stop_token_ids: tuple = ()
    ignore_eos: bool = False


def mapped(body, **kwargs):
    return sampling.to_sampling_params(body, chat=kwargs.pop("chat", False),
                                       max_tokens=kwargs.pop("max_tokens", 7),
                                       seed=kwargs.pop("seed", None), limits=LIMITS)


@pytest.mark.parametrize(("name", "value", "neutral"), [
    ("presence_penalty", 0.3, 0.0), ("frequency_penalty", -0.5, 0),
    ("repetition_penalty", 1.1, 1.0), ("min_p", 0.05, 0.0),
    ("logit_bias", {"5": 2.0}, {}), ("skip_special_tokens", True, False),
])
def test_a_field_the_params_lack_is_unsupported(monkeypatch, name, value, neutral):
    monkeypatch.setattr(sampling, "SamplingParams", OldParams)
    with pytest.raises(APIError) as caught:
        mapped({name: value})
    assert caught.value.status == 400
    assert caught.value.code == "unsupported_parameter" and caught.value.param == name
    params = mapped({name: neutral, "temperature": 0.5})
    assert params == OldParams(temperature=0.5, max_new_tokens=7)


def test_logprobs_the_params_lack_are_unsupported(monkeypatch):
    monkeypatch.setattr(sampling, "SamplingParams", OldParams)
    for body, chat in (({"logprobs": True, "top_logprobs": 2}, True), ({"logprobs": 1}, False)):
        with pytest.raises(APIError) as caught:
            mapped(body, chat=chat)
        assert caught.value.code == "unsupported_parameter"
        assert caught.value.param == "logprobs"
    assert mapped({"logprobs": False}, chat=True).max_new_tokens == 7


def test_every_field_lands_by_name():
    fields = sampling.sampling_fields()
    body = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "stop": ["x", "yz"],
            "stop_token_ids": [3], "ignore_eos": True, "min_p": 0.1, "presence_penalty": 0.2,
            "frequency_penalty": 0.3, "repetition_penalty": 1.2, "logit_bias": {"4": -1},
            "skip_special_tokens": False}
    params = mapped(body, seed=9, max_tokens=11)
    expected = {"temperature": 0.7, "top_p": 0.9, "top_k": 5, "stop": ("x", "yz"),
                "stop_token_ids": (3,), "ignore_eos": True, "seed": 9}
    for name, value in expected.items():
        assert getattr(params, name) == value
    for name in ("min_p", "presence_penalty", "frequency_penalty", "repetition_penalty",
                 "skip_special_tokens"):
        if name in fields:
            assert getattr(params, name) == body[name]
    if "logit_bias" in fields:
        assert dict(params.logit_bias) == {4: -1.0}
    assert getattr(params, "max_tokens" if "max_tokens" in fields else "max_new_tokens") == 11


def test_openai_defaults_and_library_checks():
    params = mapped({})
    assert params.temperature == 1.0 and params.top_p == 1.0  # OpenAI's default temperature
    assert mapped({"top_k": -1}).top_k in (0, -1)  # vLLM's "no cut"
    with pytest.raises(APIError) as caught:
        mapped({"top_p": 1.5})
    assert caught.value.param == "top_p" and caught.value.status == 400
    assert sampling.choice_seeds(5, 3) == [5, 6, 7]
    assert sampling.choice_seeds(2**63 - 1, 2) == [2**63 - 1, 0]
    assert sampling.choice_seeds(None, 2) == [None, None]
    assert isinstance(mapped({}), SamplingParams)
