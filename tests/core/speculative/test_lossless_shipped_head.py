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
from eagle_hal.speculative.config import SpecConfig

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


@pytest.mark.parametrize("spec", [SpecConfig(5, 1), SpecConfig(4, 4, 8)],
                         ids=["chain-S5", "tree-K4-N8"])
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
    assert mean_accept > 1.3, (
        f"the shipped head is accepted no better than chance ({mean_accept:.2f})"
    )
    assert speculative.used_pages == 0


def _dense_chain_accepts(llm: LLM, prompt: list[int], plain: list[int], steps: int,
                         max_new_tokens: int) -> tuple[int, int]:
    """(verify passes, tokens they emit) of greedy chain decoding, brute force: at every
    chain origin the head runs over the whole sequence again with dense attention (no
    paged KV, no draft state carried between iterations), reading the target's true
    features up to the origin and its own outputs after it. ``plain`` is the target's
    greedy continuation, long enough to judge the last chain."""
    import torch
    from eagle_hal.train.dense import draft_forward, target_features

    tokens = torch.tensor(prompt + plain)
    with torch.no_grad():
        features = target_features(llm.target, tokens[None])[0]  # [L, H]
        passes = emitted = 0
        out = 1  # the prefill's token
        while out < max_new_tokens:
            origin = len(prompt) + out - 1  # the newest token, no feature of its own yet
            inputs, hidden = tokens[1 : origin + 1], features[:origin]  # draft i reads x[i+1], f[i]
            matches = 0
            for step in range(steps):
                last = draft_forward(llm.draft, inputs[None], hidden[None])[0, -1]
                guess = int(llm.draft.compute_logits(last[None]).argmax(-1))
                if guess != int(tokens[origin + 1 + step]):
                    break
                matches += 1
                inputs = torch.cat([inputs, torch.tensor([guess])])
                hidden = torch.cat([hidden, last[None]])
            passes += 1
            emitted += matches + 1
            out += matches + 1
    return passes, emitted


def test_shipped_head_accepts_what_a_dense_chain_predicts(shipped: LLM) -> None:
    """The engine accepts exactly the drafts a brute-force dense re-run of the head
    predicts, verify pass by verify pass in total: the paged draft KV, the features handed
    from verify to draft and the draft's extend lose nothing (a bug there would keep the
    tokens lossless but accept fewer drafts)."""
    steps, new = 5, 32
    plain = LLM.from_models(shipped.backend, shipped.target, None, shipped.tokenizer,
                            SpecConfig(num_steps=0), max_batch_size=4)
    chain = LLM.from_models(shipped.backend, shipped.target, shipped.draft, shipped.tokenizer,
                            SpecConfig(steps, 1), max_batch_size=4)
    for text in PROMPTS:
        prompt = shipped.encode(text, chat=True)
        params = SamplingParams(max_new_tokens=new + steps + 1, ignore_eos=True)
        longer = plain.generate([prompt], params)[0]
        output = chain.generate([prompt], SamplingParams(max_new_tokens=new, ignore_eos=True))[0]
        expected = _dense_chain_accepts(shipped, prompt, list(longer.token_ids), steps, new)
        assert (output.stats.verify_steps, output.stats.accepted_tokens) == expected
        assert expected[1] > expected[0]  # some draft was accepted: the check is not vacuous
