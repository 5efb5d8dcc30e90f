"""Area 8, soak: a few hundred requests of random lengths and settings through one engine
with a small KV cache (so requests queue and may be preempted). No request may fail, every
output must respect its limits and vocabulary, greedy requests must equal plain decoding,
and no KV page may be held once everything finished."""

from __future__ import annotations

import random

from eagle_hal.backend import Backend
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig

REQUESTS = 240
VOCAB = 97


def test_random_requests_leave_no_pages(backend: Backend) -> None:
    """REQUESTS random requests: no errors, limits respected, greedy == plain, no pages left."""
    from eagle_hal.api import LLM
    from eagle_hal.testing.models import matching_eagle1, near_bigram_target

    device = backend.torch_device
    target = near_bigram_target(seed=21, vocab=VOCAB, device=device)
    head = matching_eagle1(target, noise=0.05).to(device)
    rng = random.Random(1234)
    prompts, params = [], []
    for i in range(REQUESTS):
        prompts.append([rng.randrange(VOCAB) for _ in range(rng.randint(1, 40))])
        temperature = rng.choice([0.0, 0.0, 0.7, 1.0])
        params.append(SamplingParams(
            temperature=temperature, top_k=rng.choice([0, 5, 20]), top_p=rng.choice([1.0, 0.9]),
            seed=i, max_tokens=rng.randint(1, 20),
            stop_token_ids=(rng.randrange(VOCAB),) if rng.random() < 0.2 else (),
        ))
    spec = SpecConfig(num_steps=3, topk=2, num_draft_tokens=6)
    llm = LLM.from_models(backend, target, head, spec=spec, max_batch_size=24,
                          kv_cache_tokens=1024, page_size=4)
    outputs = llm.generate(prompts, params)
    assert len(outputs) == REQUESTS
    for i, (out, p) in enumerate(zip(outputs, params, strict=True)):
        assert out.error is None, f"soak request {i} failed: {out.error}"
        assert 1 <= len(out.token_ids) <= p.max_tokens, (
            f"soak request {i}: {len(out.token_ids)} tokens for max_tokens={p.max_tokens}"
        )
        assert all(0 <= t < VOCAB for t in out.token_ids), (
            f"soak request {i}: token outside vocabulary"
        )
    assert llm.used_pages == 0, f"{llm.used_pages} KV pages still held after {REQUESTS} requests"
    assert llm.leaked_pages == 0, f"{llm.leaked_pages} KV pages leaked"
    greedy = [i for i, p in enumerate(params) if p.temperature == 0.0][:60]
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0), max_batch_size=24)
    expected = plain.generate([prompts[i] for i in greedy], [params[i] for i in greedy])
    for i, want in zip(greedy, expected, strict=True):
        assert outputs[i].token_ids == want.token_ids, (
            f"soak request {i} (greedy, batched with sampled requests) differs from plain "
            f"decoding: "
            f"{list(outputs[i].token_ids)} vs {list(want.token_ids)}"
        )
