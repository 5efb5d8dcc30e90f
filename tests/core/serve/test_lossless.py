"""Speculative decoding through HTTP is lossless: at temperature 0, in float32 on the CPU,
what the server streams equals plain decoding (``LLM.generate`` without a draft, each
prompt alone) token for token, for chains and trees, with and without overlap, for
requests streamed concurrently (so batched together), and for requests that run into the
end of the context."""

from __future__ import annotations

import asyncio

import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from serving import MODEL, make_llm, start_server

MAX_CONTEXT = 96
PROMPTS = ["the cat sat", "a dog", "then the rain fell on the inn", "at", "another tea then",
           "in the end there"]
# (prompt, max_tokens) of completions; then chats without max_tokens, which run into the
# end of the context
REQUESTS = [(p, 20 + 3 * i) for i, p in enumerate(PROMPTS)] + [
    ([{"role": "user", "content": "the end is near"}], None),
    ([{"role": "user", "content": "on and on"}], None)]


@pytest.fixture(scope="module")
def plain(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False, max_context=MAX_CONTEXT)
    return [llm.generate([prompt], SamplingParams(max_tokens=budget or 10_000,
                                                  ignore_eos=True), chat=budget is None)[0]
            for prompt, budget in REQUESTS]


async def stream_one(client, prompt, budget):
    extra = {"ignore_eos": True, "return_token_ids": True}
    if budget is None:
        stream = await client.chat.completions.create(
            model=MODEL, messages=prompt, temperature=0, stream=True, extra_body=extra)
    else:
        stream = await client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=budget, temperature=0, stream=True,
            extra_body=extra)
    ids, text, reason, detail = [], "", None, None
    async for chunk in stream:
        choice = chunk.choices[0]
        ids += getattr(choice, "token_ids", None) or []
        text += (choice.delta.content or "") if budget is None else choice.text
        if choice.finish_reason is not None:
            reason, detail = choice.finish_reason, choice.eagle_hal_finish_reason
    return ids, text, reason, detail


@pytest.mark.parametrize("overlap", [False, True], ids=["eager", "overlap"])
@pytest.mark.parametrize("spec", [SpecConfig(3, 1, 4), SpecConfig(3, 2, 6)],
                         ids=["chain", "tree"])
def test_streamed_speculative_output_equals_plain_decoding(cpu_backend, models,
                                                           byte_tokenizer, plain, spec,
                                                           overlap):
    llm = make_llm(cpu_backend, models, byte_tokenizer, spec=spec, overlap=overlap,
                   max_context=MAX_CONTEXT, max_batch_size=4)
    with start_server(llm) as running:
        client = running.async_client()

        async def everyone():
            return await asyncio.gather(*(stream_one(client, p, b) for p, b in REQUESTS))

        got = asyncio.run(everyone())
        running.wait_idle()
        assert llm.used_pages == 0 and llm.leaked_pages == 0
    for (ids, text, reason, detail), want in zip(got, plain, strict=True):
        assert ids == list(want.token_ids)
        assert text == want.text
        assert detail == want.finish_reason.value
        assert reason == "length"
    assert [d for *_, d in got] == ["length"] * len(PROMPTS) + ["context_full"] * 2
