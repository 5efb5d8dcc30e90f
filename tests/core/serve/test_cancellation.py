"""Clients that disconnect mid-stream, with overlap on (an iteration always in flight).

A disconnect is applied by the engine thread between steps (``serve.engine_loop``); the
cancelled request's KV pages go back while the worker still holds an iteration in flight
that includes it, and queued requests then reuse them. The oracle is each prompt decoded
alone by plain decoding outside the server: every surviving request must equal it token
for token (a page freed too early, or written by the cancelled request's stale iteration
after its reuse, would change a survivor's tokens), every victim must have received a
prefix of it, and afterwards no KV page may be in use or leaked.
"""

from __future__ import annotations

import asyncio

import pytest
from eagle_hal.engine.request import SamplingParams
from serving import MODEL, make_llm, start_server

PROMPTS = ["the cat", "a dog ran", "then the rain", "in the end", "on and on", "at the inn",
           "there"]
MAX_TOKENS = 24


@pytest.fixture(scope="module")
def expected(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    return [llm.generate([p], SamplingParams(max_tokens=MAX_TOKENS, ignore_eos=True))[0]
            for p in PROMPTS]


async def one_client(running, prompt: str, cut_after: int | None):
    """Stream ``prompt``; with ``cut_after``, disconnect after that many chunks of text.
    Returns (token ids received, finished)."""
    client = running.async_client()
    ids: list[int] = []
    finished = False
    stream = await client.completions.create(
        model=MODEL, prompt=prompt, max_tokens=MAX_TOKENS, temperature=0, stream=True,
        extra_body={"ignore_eos": True, "return_token_ids": True})
    chunks = 0
    async for chunk in stream:
        choice = chunk.choices[0]
        ids += getattr(choice, "token_ids", None) or []
        chunks += 1
        if choice.finish_reason is not None:
            finished = True
        if cut_after is not None and chunks >= cut_after:
            await stream.close()
            break
    await client.close()
    return ids, finished


@pytest.mark.parametrize("draft", [False, True], ids=["plain", "speculative"])
def test_disconnects_in_flight_spare_the_others_and_free_every_page(
        cpu_backend, models, byte_tokenizer, expected, draft):
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=draft, overlap=True,
                   max_batch_size=3)
    in_flight_at_cancel: list[bool] = []
    cancel = llm.engine.cancel

    def recording_cancel(request_id):  # runs on the engine thread, between steps
        in_flight_at_cancel.append(llm.worker.in_flight)
        cancel(request_id)

    llm.engine.cancel = recording_cancel
    cuts = [3 if i % 2 else None for i in range(len(PROMPTS))]
    with start_server(llm) as running:
        async def everyone():
            return await asyncio.gather(*(one_client(running, p, c)
                                          for p, c in zip(PROMPTS, cuts, strict=True)))
        results = asyncio.run(everyone())
        running.wait_idle()
        assert llm.used_pages == 0 and llm.leaked_pages == 0
        assert llm.engine.has_unfinished() is False
    assert any(in_flight_at_cancel), "no disconnect met an iteration in flight"
    for (ids, finished), cut, want in zip(results, cuts, expected, strict=True):
        if cut is None:
            assert finished and ids == list(want.token_ids)
        else:
            assert ids == list(want.token_ids[: len(ids)])


def test_a_stream_whose_client_left_before_its_first_byte_is_cancelled():
    """The response cancels its jobs even when sending fails before the body's generator
    ever started (so no ``finally`` inside the generator runs)."""
    from eagle_hal.serve.app import _CancellingStream
    from starlette.requests import ClientDisconnect

    started, cancelled = [], []

    class Loop:
        def cancel(self, jobs):
            cancelled.append(list(jobs))

    async def body():
        started.append(True)
        yield "data: x\n\n"

    async def receive():
        await asyncio.sleep(3600)  # the client sends nothing more
        return {"type": "http.disconnect"}

    async def send(message):
        raise OSError("the client went away")

    jobs = ["job"]
    response = _CancellingStream(body(), Loop(), jobs, media_type="text/event-stream")
    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.4"},
             "http_version": "1.1", "method": "POST", "path": "/v1/completions"}
    with pytest.raises((OSError, ClientDisconnect)):  # starlette may wrap it
        asyncio.run(response(scope, receive, send))
    assert cancelled == [jobs] and not started
