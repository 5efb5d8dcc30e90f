"""The shipped head on the real default model: speculation changes nothing but speed.

Oracle: plain greedy decoding of the same SmolLM2-135M-Instruct target (float32, CPU), one
DECODE forward per token, no draft at all. The head is the trained EAGLE-1 head that ships
in ``eagle_hal/data``; a trained head must also be accepted well above chance.
"""

from __future__ import annotations

import pytest

from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.model.errors import ModelFileNotFound
from eagle_hal.model.loading import default_draft_path, default_model_path
from eagle_hal.spec.config import SpecConfig

PROMPTS = ["What is the capital of France?", "List three prime numbers."]


@pytest.fixture(scope="module")
def shipped() -> LLM:
    try:
        default_model_path()
    except ModelFileNotFound as exc:
        pytest.skip(str(exc))
    if default_draft_path() is None:
        pytest.fail("no EAGLE head ships in eagle_hal/data for the default model")
    return LLM(device="cpu", dtype="float32", progress=False, max_batch_size=4, max_context=512)


@pytest.mark.parametrize("spec", [SpecConfig(5, 1), SpecConfig(4, 4, 8)], ids=["chain-S5", "tree-K4-N8"])
def test_shipped_head_is_lossless_and_accepted(shipped: LLM, spec: SpecConfig) -> None:
    params = SamplingParams(max_new_tokens=20)
    plain = LLM.from_models(shipped.backend, shipped.target, None, shipped.tokenizer,
                            SpecConfig(num_steps=0), max_batch_size=4)
    expected = plain.generate(PROMPTS, params, chat=True)
    speculative = LLM.from_models(shipped.backend, shipped.target, shipped.draft, shipped.tokenizer,
                                  spec, max_batch_size=4)
    outputs = speculative.generate(PROMPTS, params, chat=True)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    mean_accept = sum(o.accept_length for o in outputs) / len(outputs)
    assert mean_accept > 1.3, f"the shipped head is accepted no better than chance ({mean_accept:.2f})"
    assert speculative.used_pages == 0
