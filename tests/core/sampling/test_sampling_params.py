"""SamplingParams: vLLM/OpenAI names, their ranges, and the deprecated max_new_tokens."""

from __future__ import annotations

import dataclasses
import math
import pickle
import warnings

import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.errors import InvalidArgument

BAD = [
    ("min_p", -0.1), ("min_p", 1.5), ("min_p", math.nan), ("min_p", "0.1"),
    ("presence_penalty", 2.5), ("presence_penalty", -2.01), ("presence_penalty", math.inf),
    ("frequency_penalty", -3.0), ("frequency_penalty", math.nan),
    ("repetition_penalty", 0.0), ("repetition_penalty", -1.0),
    ("repetition_penalty", math.inf), ("repetition_penalty", math.nan),
    ("top_k", -2), ("top_k", 1.5), ("top_k", True),
    ("max_tokens", 0), ("max_tokens", -3), ("max_tokens", 2.0), ("max_tokens", True),
    ("logprobs", -1), ("logprobs", 21), ("logprobs", 1.0), ("logprobs", True),
    ("logprobs_mode", "processed_logprobs"), ("logprobs_mode", None),
    ("skip_special_tokens", 1), ("ignore_eos", "yes"),
    ("logit_bias", [1, 2]), ("logit_bias", {-1: 1.0}), ("logit_bias", {"a": 1.0}),
    ("logit_bias", {1.5: 1.0}), ("logit_bias", {True: 1.0}),
    ("temperature", math.nan), ("top_p", 0.0),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_bad_value_names_its_field(name, value):
    with pytest.raises(InvalidArgument) as caught:
        SamplingParams(**{name: value})
    assert caught.value.name.split("[")[0] == name
    assert name in str(caught.value)


@pytest.mark.parametrize("bias", [math.nan, math.inf, -math.inf, "3"])
def test_a_logit_bias_must_be_a_finite_number(bias):
    with pytest.raises(InvalidArgument) as caught:
        SamplingParams(logit_bias={7: bias})
    assert caught.value.name == "logit_bias[7]"


def test_ranges_include_their_ends():
    p = SamplingParams(min_p=1.0, presence_penalty=-2.0, frequency_penalty=2.0,
                       repetition_penalty=1e-3, logprobs=20)
    assert (p.min_p, p.presence_penalty, p.frequency_penalty) == (1.0, -2.0, 2.0)
    assert SamplingParams(min_p=0.0, logprobs=0).logprobs == 0


@pytest.mark.parametrize("off", [0, -1])
def test_top_k_zero_and_minus_one_are_off(off):
    assert SamplingParams(top_k=off).top_k == 0


def test_logit_bias_is_clamped_and_keys_may_be_json_strings():
    p = SamplingParams(logit_bias={"12": 250, 3: -101.5, 4: 0.25})
    assert p.logit_bias == {12: 100.0, 3: -100.0, 4: 0.25}
    assert SamplingParams(logit_bias={}).logit_bias is None
    assert p.processes_logits and not p.uses_penalties


def test_defaults_are_vllms():
    p = SamplingParams()
    assert (p.max_tokens, p.top_k, p.min_p, p.repetition_penalty) == (128, 0, 0.0, 1.0)
    assert (p.logprobs, p.logprobs_mode, p.skip_special_tokens) == (None, "processed", True)
    assert not p.processes_logits and not p.uses_penalties


def test_max_new_tokens_is_a_deprecated_alias():
    with pytest.warns(DeprecationWarning, match="max_tokens"):
        p = SamplingParams(max_new_tokens=9)
    assert p.max_tokens == 9
    with pytest.warns(DeprecationWarning):
        assert p.max_new_tokens == 9
    with pytest.warns(DeprecationWarning):
        assert SamplingParams(max_tokens=9, max_new_tokens=9).max_tokens == 9
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SamplingParams(max_tokens=9)  # the new name warns about nothing


def test_both_names_with_different_values_are_refused():
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument) as caught:
        SamplingParams(max_tokens=5, max_new_tokens=6)
    assert caught.value.name == "max_new_tokens"
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument) as caught:
        SamplingParams(max_new_tokens=0)
    assert caught.value.name == "max_new_tokens"
    # positionally, max_tokens is the fifth field, as max_new_tokens was
    assert SamplingParams(0.5, 1.0, 0, None, 7).max_tokens == 7
    with pytest.warns(DeprecationWarning), pytest.raises(InvalidArgument):
        SamplingParams(0.5, 1.0, 0, None, 7, max_new_tokens=8)


def test_replace_hash_and_pickle_keep_working():
    p = SamplingParams(temperature=0.5, logit_bias={1: 2.0}, presence_penalty=0.5)
    q = dataclasses.replace(p, max_tokens=3)
    assert q.max_tokens == 3 and q.logit_bias == {1: 2.0}
    assert hash(p) == hash(dataclasses.replace(p, logit_bias={1: 3.0}))  # bias not hashed
    assert p != dataclasses.replace(p, logit_bias={1: 3.0})
    assert pickle.loads(pickle.dumps(p)) == p


def test_a_logit_bias_outside_the_vocabulary_is_refused_before_anything_runs():
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import tiny_target

    target = tiny_target(seed=1, vocab=16)
    llm = LLM.from_models(select_backend("cpu"), target, None, spec=SpecConfig(num_steps=0))
    with pytest.raises(InvalidArgument) as caught:
        llm.generate([[1, 2]], SamplingParams(logit_bias={16: 1.0}))
    assert caught.value.name == "logit_bias"
    assert llm.used_pages == 0
    assert len(llm.generate([[1, 2]], SamplingParams(logit_bias={15: 1.0}, max_tokens=2))[0]
               .token_ids) == 2
