"""The server's endpoints through the real HTTP stack and the real ``openai`` client.

The oracle for every generated text is ``LLM.generate`` on the same tiny models without
the server (plain decoding, no draft: speculative decoding is lossless against it, and
plain decoding is tested against HF transformers in tests/core/model). Errors are checked
on status code and on OpenAI's body shape, ``{"error": {message, type, param, code}}``.
"""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.serve.limits import RequestLimits
from serving import MODEL, make_llm, start_server

PROMPT = "the cat sat on the mat"
CHAT = [{"role": "user", "content": "hello there"}]


@pytest.fixture(scope="module")
def server(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer)
    limits = RequestLimits(max_body_bytes=16_384, max_n=6, max_stop=3, max_logit_bias=4,
                           max_top_logprobs=5)
    with start_server(llm, limits=limits) as running:
        yield running


def solo(llm):
    """``llm``'s output for one prompt alone."""

    def generate(prompt, *, chat=False, max_tokens=24, **params):
        return llm.generate([prompt], SamplingParams(max_tokens=max_tokens, **params),
                            chat=chat)[0]

    return generate


@pytest.fixture(scope="module")
def oracle(cpu_backend, models, byte_tokenizer):
    """Plain decoding of the same target, outside the server: what greedy speculative
    decoding must equal."""
    return solo(make_llm(cpu_backend, models, byte_tokenizer, draft=False))


@pytest.fixture(scope="module")
def sampled_oracle(cpu_backend, models, byte_tokenizer):
    """The server's settings (the draft, the spec) outside the server, one request at a
    time: a sampled request's tokens depend on its seed, not on its batch."""
    return solo(make_llm(cpu_backend, models, byte_tokenizer))


def error_of(response: httpx.Response) -> dict:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"message", "type", "param", "code"}
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


def api_error(exc: openai.APIStatusError) -> dict:
    return error_of(exc.response)


def post(server, path: str, content: bytes | str, **headers) -> httpx.Response:
    headers.setdefault("content-type", "application/json")
    return httpx.post(f"{server.url}{path}", content=content, headers=headers, timeout=30)


# -- what works ---------------------------------------------------------------------------------


def test_models_lists_the_served_name(server):
    models = server.client().models.list()
    assert [m.id for m in models.data] == [MODEL]
    assert server.client().models.retrieve(MODEL).id == MODEL
    with pytest.raises(openai.NotFoundError):
        server.client().models.retrieve("other")


def test_health_is_ok(server):
    response = httpx.get(f"{server.url}/health")
    assert response.status_code == 200 and response.json() == {"status": "ok"}


def test_completion_equals_plain_decoding(server, oracle):
    expected = oracle(PROMPT, max_tokens=24)
    out = server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=24,
                                             temperature=0,
                                             extra_body={"return_token_ids": True})
    assert out.object == "text_completion" and out.model == MODEL
    (choice,) = out.choices
    assert choice.text == expected.text
    assert choice.token_ids == list(expected.token_ids)
    assert choice.finish_reason == {"length": "length", "stop": "stop"}[
        expected.finish_reason.value]
    assert out.usage.completion_tokens == len(expected.token_ids)
    assert out.usage.prompt_tokens == len(server.llm.tokenizer.encode(PROMPT))
    assert out.usage.total_tokens == out.usage.prompt_tokens + out.usage.completion_tokens


def test_completion_of_token_ids_and_several_prompts(server, oracle):
    ids = server.llm.tokenizer.encode("a dog")
    out = server.client().completions.create(model=MODEL, prompt=[PROMPT, "a dog"],
                                             max_tokens=10, temperature=0)
    assert [c.index for c in out.choices] == [0, 1]
    assert [c.text for c in out.choices] == [oracle(PROMPT, max_tokens=10).text,
                                            oracle("a dog", max_tokens=10).text]
    out = server.client().completions.create(model=MODEL, prompt=ids, max_tokens=10,
                                             temperature=0)
    assert out.choices[0].text == oracle(ids, max_tokens=10).text


def test_streamed_completion_equals_plain_decoding(server, oracle):
    expected = oracle(PROMPT, max_tokens=30)
    chunks = list(server.client().completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=30, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    text = "".join(c.choices[0].text for c in chunks if c.choices)
    assert text == expected.text
    reasons = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert reasons[-1] in ("stop", "length") and set(reasons[:-1]) == {None}
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == len(
        expected.token_ids)
    assert all(c.usage is None for c in chunks[:-1])


def test_chat_equals_plain_decoding_of_the_template(server, oracle):
    expected = oracle(CHAT, chat=True, max_tokens=20)
    out = server.client().chat.completions.create(model=MODEL, messages=CHAT,
                                                  max_tokens=20, temperature=0)
    assert out.object == "chat.completion"
    assert out.choices[0].message.role == "assistant"
    assert out.choices[0].message.content == expected.text
    assert out.usage.prompt_tokens == len(server.llm.encode(CHAT))


def test_streamed_chat_equals_plain_decoding(server, oracle):
    expected = oracle(CHAT, chat=True, max_tokens=20)
    chunks = list(server.client().chat.completions.create(
        model=MODEL, messages=CHAT, max_completion_tokens=20, temperature=0, stream=True))
    assert chunks[0].choices[0].delta.role == "assistant"
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected.text
    assert chunks[-1].choices[0].finish_reason in ("stop", "length")
    assert all(c.usage is None for c in chunks)  # no include_usage: no usage chunk


def test_n_choices_sample_with_seeds_derived_from_the_request(server, sampled_oracle):
    oracle = sampled_oracle
    out = server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=16,
                                             temperature=0.9, seed=11, n=3)
    assert [c.index for c in out.choices] == [0, 1, 2]
    expected = [oracle(PROMPT, max_tokens=16, temperature=0.9, seed=11 + i).text
                for i in range(3)]
    assert [c.text for c in out.choices] == expected
    assert len(set(expected)) > 1  # the seeds differ, so (here) do the samples
    chunks = list(server.client().chat.completions.create(
        model=MODEL, messages=CHAT, max_tokens=12, temperature=0.9, seed=5, n=2,
        stream=True))
    texts = {0: "", 1: ""}
    for chunk in chunks:
        for choice in chunk.choices:
            texts[choice.index] += choice.delta.content or ""
    assert texts == {i: oracle(CHAT, chat=True, max_tokens=12, temperature=0.9,
                               seed=5 + i).text for i in range(2)}


def stop_across_tokens(server, output):
    """A stop string made of the end of one token and the start of the next, whose first
    occurrence in the output is there (so no single token holds it)."""
    pieces = [server.llm.tokenizer.decode([t]) for t in output.token_ids]
    assert "".join(pieces) == output.text
    end = 0
    for i in range(len(pieces) - 1):
        end += len(pieces[i])
        stop = pieces[i][-1:] + pieces[i + 1][:1]
        if i >= 2 and len(stop) == 2 and output.text.find(stop) == end - 1:
            return stop
    raise AssertionError("no two-token stop string in the output")


@pytest.mark.parametrize("stream", [False, True])
def test_stop_strings_across_token_boundaries(server, oracle, stream):
    full = oracle(PROMPT, max_tokens=40, ignore_eos=True)
    stop = stop_across_tokens(server, full)
    expected = full.text[: full.text.index(stop)]
    response = server.client().completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=40, temperature=0, stop=[stop, "@@@"],
        stream=stream, extra_body={"ignore_eos": True})
    if stream:
        chunks = list(response)
        text = "".join(c.choices[0].text for c in chunks)
        reason = chunks[-1].choices[0].finish_reason
    else:
        text, reason = response.choices[0].text, response.choices[0].finish_reason
    assert text == expected and reason == "stop"


def test_context_full_is_length_with_the_precise_reason(server, oracle):
    """A chat without max_tokens runs until the context is full: OpenAI's "length", and
    ``eagle_hal_finish_reason`` says which."""
    out = server.client().chat.completions.create(model=MODEL, messages=CHAT, temperature=0,
                                                  extra_body={"ignore_eos": True})
    choice = out.choices[0]
    assert choice.finish_reason == "length"
    assert choice.eagle_hal_finish_reason == "context_full"
    expected = oracle(CHAT, chat=True, max_tokens=10_000, ignore_eos=True)
    assert expected.finish_reason.value == "context_full"
    assert choice.message.content == expected.text
    assert out.usage.total_tokens == server.llm.scheduler.config.max_context


# -- what is refused ----------------------------------------------------------------------------


def test_malformed_json_is_400(server):
    response = post(server, "/v1/completions", b'{"model": "tiny", "prompt": ')
    assert response.status_code == 400
    error = error_of(response)
    assert error["type"] == "invalid_request_error" and error["code"] == "invalid_json"
    response = post(server, "/v1/chat/completions", b"[1, 2]")
    assert response.status_code == 400 and error_of(response)["code"] == "invalid_json"


def test_unknown_model_is_404(server):
    with pytest.raises(openai.NotFoundError) as caught:
        server.client().completions.create(model="gpt-9", prompt=PROMPT, max_tokens=4)
    error = api_error(caught.value)
    assert caught.value.status_code == 404
    assert error["code"] == "model_not_found" and error["param"] == "model"


def test_unknown_route_is_404_in_openai_shape(server):
    response = httpx.get(f"{server.url}/v1/engines")
    assert response.status_code == 404 and error_of(response)["code"] == "not_found"


def test_a_prompt_longer_than_the_context_is_400(server):
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL, prompt="ab " * 300, max_tokens=4)
    error = api_error(caught.value)
    assert error["param"] == "prompt" and error["code"] == "context_length_exceeded"


def test_max_tokens_past_the_context_is_400(server):
    prompt_len = len(server.llm.tokenizer.encode(PROMPT))
    room = server.llm.scheduler.config.max_context - prompt_len
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=room + 1)
    error = api_error(caught.value)
    assert error["param"] == "max_tokens" and error["code"] == "context_length_exceeded"
    with pytest.raises(openai.BadRequestError) as caught:
        server.client().chat.completions.create(model=MODEL, messages=CHAT,
                                                max_completion_tokens=10_000)
    assert api_error(caught.value)["param"] == "max_completion_tokens"


def test_an_oversized_body_is_413(server):
    with pytest.raises(openai.APIStatusError) as caught:
        server.client().completions.create(model=MODEL, prompt="x" * 20_000, max_tokens=4)
    assert caught.value.status_code == 413
    assert api_error(caught.value)["code"] == "request_too_large"


@pytest.mark.parametrize(("fields", "param"), [
    ({"n": 7}, "n"),
    ({"n": 0}, "n"),
    ({"stop": ["a", "b", "c", "d"]}, "stop"),
    ({"stop": ["x" * 300]}, "stop"),
    ({"logit_bias": {str(i): 1 for i in range(5)}}, "logit_bias"),
    ({"logprobs": 6}, "logprobs"),
    ({"temperature": -1}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"seed": -3}, "seed"),
    ({"echo": True}, "echo"),
    ({"logit_bias": {"100000": 5}}, "logit_bias"),
    ({"logit_bias": {"-1": 5}}, "logit_bias"),
    ({"stop_token_ids": [100000]}, "stop_token_ids"),
    ({"best_of": 3}, "best_of"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_caps_and_bad_values_are_400_naming_the_field(server, fields, param):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, **fields}
    response = post(server, "/v1/completions", json.dumps(body))
    assert response.status_code == 400, response.text
    error = error_of(response)
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_neutral_sampling_values_change_nothing(server, oracle):
    """A penalty of 0 (repetition 1), min_p 0 and an empty logit_bias sample what a body
    without them samples."""
    neutral = {"presence_penalty": 0, "frequency_penalty": 0, "repetition_penalty": 1,
               "min_p": 0, "logit_bias": {}}
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4, "temperature": 0, **neutral}
    response = post(server, "/v1/completions", json.dumps(body))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["text"] == oracle(PROMPT, max_tokens=4).text


def test_prompts_are_tokenized_off_the_event_loop(server, monkeypatch):
    """The event loop (the server's thread) keeps serving the open streams meanwhile."""
    import threading

    threads = []
    encode = server.llm.encode

    def recording(prompt, *, chat=False):
        threads.append(threading.current_thread().name)
        return encode(prompt, chat=chat)

    monkeypatch.setattr(server.llm, "encode", recording)
    body = {"model": MODEL, "prompt": [PROMPT, "a second one"], "max_tokens": 2}
    assert post(server, "/v1/completions", json.dumps(body)).status_code == 200
    assert len(threads) == 2 and "eagle-hal-serve" not in threads


def test_stream_options_need_stream(server):
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4,
            "stream_options": {"include_usage": True}}
    response = post(server, "/v1/completions", json.dumps(body))
    assert response.status_code == 400 and error_of(response)["param"] == "stream_options"


def test_penalties_and_bias_reach_the_engine(server, sampled_oracle):
    """Every sampling field through HTTP samples what LLM.generate samples with them."""
    fields = {"presence_penalty": 0.5, "frequency_penalty": 0.3, "repetition_penalty": 1.2,
              "min_p": 0.05, "top_k": 20, "top_p": 0.95}
    bias = {5: 3.0, 7: -100.0}
    body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 12, "temperature": 0.8,
            "seed": 4, "logit_bias": {str(k): v for k, v in bias.items()}, **fields}
    response = post(server, "/v1/completions", json.dumps(body))
    assert response.status_code == 200, response.text
    expected = sampled_oracle(PROMPT, max_tokens=12, temperature=0.8, seed=4,
                              logit_bias=bias, **fields)
    assert response.json()["choices"][0]["text"] == expected.text
    plain = sampled_oracle(PROMPT, max_tokens=12, temperature=0.8, seed=4)
    assert plain.text != expected.text  # the fields changed something


def test_logprobs_equal_plain_decodings(server, oracle):
    """Chat's ``logprobs.content`` and a completion's parallel lists: the chosen tokens'
    log probabilities and the top alternatives, as plain decoding reports them."""
    decode = server.llm.tokenizer.decode
    expected = oracle(CHAT, chat=True, max_tokens=6, logprobs=2, ignore_eos=True)
    body = {"model": MODEL, "messages": CHAT, "max_tokens": 6, "logprobs": True,
            "top_logprobs": 2, "temperature": 0, "ignore_eos": True}
    response = post(server, "/v1/chat/completions", json.dumps(body))
    assert response.status_code == 200, response.text
    content = response.json()["choices"][0]["logprobs"]["content"]
    assert len(content) == len(expected.token_ids) == 6
    for entry, token, want in zip(content, expected.token_ids, expected.logprobs, strict=True):
        assert entry["token"] == decode([token])
        assert entry["logprob"] == pytest.approx(want.logprob, abs=1e-5)
        assert [t["token"] for t in entry["top_logprobs"]] == [decode([t]) for t, _ in want.top]
        assert [t["logprob"] for t in entry["top_logprobs"]] == pytest.approx(
            [lp for _, lp in want.top], abs=1e-5)
    expected = oracle(PROMPT, max_tokens=5, logprobs=3, ignore_eos=True)
    out = server.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=5,
                                             logprobs=3, temperature=0,
                                             extra_body={"ignore_eos": True})
    lp = out.choices[0].logprobs
    assert lp.tokens == [decode([t]) for t in expected.token_ids]
    assert lp.token_logprobs == pytest.approx([e.logprob for e in expected.logprobs], abs=1e-5)
    assert [list(d) for d in lp.top_logprobs] == [[decode([t]) for t, _ in e.top]
                                                   for e in expected.logprobs]
    assert lp.text_offset == [sum(len(x) for x in lp.tokens[:i]) for i in range(5)]


def test_streamed_logprobs_cover_every_token(server, oracle):
    expected = oracle(PROMPT, max_tokens=8, logprobs=1, ignore_eos=True)
    chunks = list(server.client().completions.create(
        model=MODEL, prompt=PROMPT, max_tokens=8, logprobs=1, temperature=0, stream=True,
        extra_body={"ignore_eos": True}))
    logprobs = [x for c in chunks if c.choices and c.choices[0].logprobs
                for x in c.choices[0].logprobs.token_logprobs]
    assert logprobs == pytest.approx([e.logprob for e in expected.logprobs], abs=1e-5)


def test_streamed_text_offsets_equal_the_response_s_with_text_held_back(server, oracle):
    """A stop string's prefix holds text back from some chunks: the offsets still count
    every token's text, as the whole response's do (cumulative single-token decodes)."""
    full = oracle(PROMPT, max_tokens=40, ignore_eos=True)
    stop = stop_across_tokens(server, full)
    args = {"model": MODEL, "prompt": PROMPT, "max_tokens": 40, "temperature": 0,
            "stop": [stop], "logprobs": 1, "extra_body": {"ignore_eos": True}}
    whole = server.client().completions.create(**args).choices[0].logprobs
    chunks = [c.choices[0] for c in server.client().completions.create(**args, stream=True)
              if c.choices and c.choices[0].logprobs]
    decode = server.llm.tokenizer.decode
    lengths = [len(decode([t])) for t in full.token_ids[: len(whole.tokens)]]
    assert whole.text_offset == [sum(lengths[:i]) for i in range(len(lengths))]
    assert [x for c in chunks for x in c.logprobs.text_offset] == whole.text_offset
    assert any(len(c.text) != len("".join(c.logprobs.tokens)) for c in chunks)  # held back


def test_tool_messages_and_bad_roles_are_400(server):
    for messages, param in (([{"role": "wizard", "content": "x"}], "messages[0].role"),
                            ([{"role": "tool", "content": "x"}], "messages[0].role"),
                            ([], "messages")):
        body = {"model": MODEL, "messages": messages}
        response = post(server, "/v1/chat/completions", json.dumps(body))
        assert response.status_code == 400 and error_of(response)["param"] == param


# -- auth ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    with start_server(llm, api_key="s3cret-key") as running:
        yield running


def test_auth_off_takes_any_or_no_key(server):
    response = httpx.get(f"{server.url}/v1/models")  # no Authorization header at all
    assert response.status_code == 200
    assert httpx.get(f"{server.url}/metrics").status_code == 200


def test_auth_on_refuses_a_missing_or_wrong_key_with_401(secured):
    with pytest.raises(openai.AuthenticationError) as caught:
        secured.client(api_key="wrong").completions.create(model=MODEL, prompt="a",
                                                           max_tokens=2)
    assert caught.value.status_code == 401
    error = api_error(caught.value)
    assert error["code"] == "invalid_api_key" and error["type"] == "invalid_request_error"
    assert caught.value.response.headers["www-authenticate"] == "Bearer"
    for headers in ({}, {"authorization": "Basic s3cret-key"},
                    {"authorization": "Bearer s3cret-ke"}):
        response = httpx.get(f"{secured.url}/v1/models", headers=headers)
        assert response.status_code == 401 and error_of(response)["code"] == "invalid_api_key"
    assert httpx.get(f"{secured.url}/metrics").status_code == 401
    assert httpx.get(f"{secured.url}/health").status_code == 200  # for load balancers


def test_auth_on_admits_the_right_key(secured):
    out = secured.client().completions.create(model=MODEL, prompt="a", max_tokens=3,
                                              temperature=0)
    assert out.usage.completion_tokens >= 1
    response = httpx.get(f"{secured.url}/metrics",
                         headers={"authorization": "Bearer s3cret-key"})
    assert response.status_code == 200 and "eagle_hal_requests_total" in response.text


# -- back-pressure and shutdown -----------------------------------------------------------------


@pytest.fixture
def single_slot(cpu_backend, models, byte_tokenizer):
    """One batch slot, nothing may wait."""
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False, max_batch_size=1)
    with start_server(llm, max_waiting=0, shutdown_grace_s=60) as running:
        yield running


def test_too_many_waiting_is_429_and_shutting_down_is_503(single_slot):
    client = single_slot.client()
    stream = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=200,
                                       temperature=0, stream=True,
                                       extra_body={"ignore_eos": True})
    first = next(iter(stream))  # the first request holds the only slot
    assert first.choices[0].finish_reason is None
    with pytest.raises(openai.RateLimitError) as caught:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4)
    assert caught.value.status_code == 429
    assert api_error(caught.value)["type"] == "rate_limit_error"
    # shutdown begins: new requests get 503, the running one still finishes
    single_slot.loop.begin_shutdown(60)
    with pytest.raises(openai.APIStatusError) as caught:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=4)
    assert caught.value.status_code == 503 and api_error(caught.value)["code"] == "shutting_down"
    assert httpx.get(f"{single_slot.url}/health").status_code == 503
    rest = list(stream)
    assert rest[-1].choices[0].finish_reason == "length"
    tokens = 1 + sum(1 for c in rest if c.choices and c.choices[0].text)
    assert tokens >= 2


def test_shutdown_past_the_grace_ends_running_requests_with_an_error(cpu_backend, models,
                                                                    byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False, max_context=1024)
    with start_server(llm, shutdown_grace_s=0) as running:
        response = httpx.stream(
            "POST", f"{running.url}/v1/completions", timeout=30,
            json={"model": MODEL, "prompt": PROMPT, "max_tokens": 1000, "stream": True,
                  "ignore_eos": True, "temperature": 0})
        with response as events:
            lines = events.iter_lines()
            assert next(line for line in lines if line.startswith("data:"))
            running.loop.begin_shutdown(0)
            rest = [line for line in lines if line.startswith("data:")]
        assert rest[-1] == "data: [DONE]"
        error = json.loads(rest[-2][len("data:"):])["error"]
        assert error["code"] == "shutting_down" and error["type"] == "service_unavailable"
        running.wait_idle()
        assert llm.used_pages == 0 and llm.leaked_pages == 0


def broken_step():
    raise RuntimeError("device lost")


def test_an_engine_failure_answers_500_and_stops_the_server(cpu_backend, models,
                                                           byte_tokenizer):
    """The failure is permanent: the server stops (a supervisor restarts the process)."""
    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    with start_server(llm) as running:
        llm.engine.step = broken_step
        with pytest.raises(openai.InternalServerError) as caught:
            running.client().completions.create(model=MODEL, prompt=PROMPT, max_tokens=4)
        error = api_error(caught.value)
        assert caught.value.status_code == 500 and "device lost" in error["message"]
        assert error["type"] == "server_error"
        running.server.join(timeout_s=30)
        assert not running.server.serving


def test_after_an_engine_failure_requests_and_health_get_503_engine_failed(
        cpu_backend, models, byte_tokenizer):
    """What clients see until the server has stopped (the app without uvicorn, which
    would stop listening)."""
    from eagle_hal.serve import ServeConfig, create_app
    from starlette.testclient import TestClient

    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    with TestClient(create_app(llm, ServeConfig(model_names=(MODEL,)))) as client:
        llm.engine.step = broken_step
        body = {"model": MODEL, "prompt": PROMPT, "max_tokens": 4}
        assert client.post("/v1/completions", json=body).status_code == 500
        later = client.post("/v1/completions", json=body)
        assert later.status_code == 503 and error_of(later)["code"] == "engine_failed"
        health = client.get("/health")
        assert health.status_code == 503 and error_of(health)["code"] == "engine_failed"
        assert "device lost" not in health.text  # no key needed: no details


def test_an_internal_error_is_500_without_its_details(cpu_backend, models, byte_tokenizer):
    from eagle_hal.serve import ServeConfig, create_app
    from starlette.testclient import TestClient

    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)

    def broken_encode(prompt, *, chat=False):
        raise RuntimeError("/secret/path/model.gguf")

    llm.encode = broken_encode
    app = create_app(llm, ServeConfig(model_names=(MODEL,)))
    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.post("/v1/completions",
                               json={"model": MODEL, "prompt": PROMPT, "max_tokens": 4})
    assert response.status_code == 500 and error_of(response)["code"] == "internal_error"
    assert "secret" not in response.text and "RuntimeError" not in response.text


def test_a_bias_outside_the_vocabulary_is_refused_at_admission(cpu_backend, models,
                                                              byte_tokenizer):
    """Engine.add_request refuses it (the engine loop answers that one request); inside a
    step it would fail the whole batch."""
    from eagle_hal.errors import InvalidArgument

    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    vocab = models[0].config.vocab_size
    with pytest.raises(InvalidArgument) as caught:
        llm.engine.add_request([1, 2, 3], SamplingParams(logit_bias={vocab: 1.0}))
    assert caught.value.name == "logit_bias"
    assert not llm.engine.has_unfinished()
    assert llm.generate([[1, 2, 3]], SamplingParams(max_tokens=2))[0].token_ids


def test_a_submission_racing_the_engine_failure_is_refused(cpu_backend, models,
                                                           byte_tokenizer):
    """A submission that passed the liveness check just as the engine thread failed (and
    stopped reading commands) is refused, never left waiting for ever."""
    import asyncio

    from eagle_hal.serve.engine_loop import EngineLoop, Job, ShuttingDown

    class Stale(EngineLoop):
        alive = True  # as read just before the engine thread failed

    llm = make_llm(cpu_backend, models, byte_tokenizer, draft=False)
    llm.engine.step = broken_step
    loop = Stale(llm)
    loop.start()

    async def scenario():
        queue = asyncio.Queue()
        running = asyncio.get_running_loop()
        first = Job([1, 2, 3], SamplingParams(max_tokens=2), queue, running)
        loop.submit([first])
        assert (await asyncio.wait_for(queue.get(), 30)).error  # the failure ends it
        loop.stop(timeout_s=30)  # the engine thread has ended
        loop.shutting_down = False  # the check ran before the failure was recorded
        late = Job([1, 2, 3], SamplingParams(max_tokens=2), queue, running)
        with pytest.raises(ShuttingDown):
            loop.submit([late])
        assert loop.outstanding == 0

    asyncio.run(scenario())
