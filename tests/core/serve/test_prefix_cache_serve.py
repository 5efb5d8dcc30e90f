"""The server's prefix cache: each request is looked up under its API key's scope, a
repeated prompt hits, and the answers are those of a server without the cache."""

from __future__ import annotations

import hashlib

import httpx
from serving import MODEL, make_llm, start_server


def spy_scopes(llm) -> list:
    scopes, add = [], llm.engine.add_request

    def recording(prompt_ids, params, **kwargs):
        scopes.append(kwargs.get("cache_scope"))
        return add(prompt_ids, params, **kwargs)

    llm.engine.add_request = recording
    return scopes


def ask(running, prompt: str) -> str:
    out = running.client().completions.create(model=MODEL, prompt=prompt, max_tokens=6,
                                              temperature=0, extra_body={"ignore_eos": True})
    return out.choices[0].text


def hit_tokens(url: str, key: str | None) -> float:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    text = httpx.get(f"{url}/metrics", headers=headers).text
    line = next(x for x in text.splitlines()
                if x.startswith("eagle_hal_prefix_cache_hit_tokens_total "))
    return float(line.split()[1])


def test_scope_per_api_key_and_hits(cpu_backend, models, byte_tokenizer):
    prompt = "the cat sat on the mat and looked at the dog"
    answers = {}
    for key, cache in (("secret", True), (None, True), (None, False)):
        llm = make_llm(cpu_backend, models, byte_tokenizer, enable_prefix_caching=cache)
        scopes = spy_scopes(llm)
        with start_server(llm, api_key=key) as running:
            first, second = ask(running, prompt), ask(running, prompt)
            running.wait_idle()
            hits = hit_tokens(running.url, key) if cache else None
        answers[(key, cache)] = (first, second)
        assert scopes[0] == scopes[1]
        if key:
            assert scopes[0] == "key:" + hashlib.sha256(key.encode()).hexdigest()
            assert key not in scopes[0]
        else:
            assert scopes[0] == "unauthenticated"
        if cache:
            assert hits > 0  # the second request reused the first one's pages
    assert len(set(answers.values())) == 1  # the same text with and without the cache
