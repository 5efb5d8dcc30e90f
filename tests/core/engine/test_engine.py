"""The engine through the public API: stops, EOS, preemption, cancellation, streaming.

The oracle is plain greedy decoding of the same model (no draft), whose own correctness
against HF transformers is tested in tests/core/model, cut where the stop rule says.
Every test ends with zero KV pages in use.
"""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM, PromptTooLong
from eagle_hal.engine.request import FinishReason, SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target
from eagle_hal.testing.tokenizers import CharTokenizer

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3, 2], [3, 8, 4, 6, 2, 6, 4, 3]]
SPEC = SpecConfig(num_steps=4, topk=2, num_draft_tokens=8)


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def models():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)


def make(backend, models, draft=True, **kwargs):
    target, head = models
    llm = LLM.from_models(backend, target, head if draft else None, kwargs.pop("tokenizer", None),
                          SPEC, **kwargs)
    return llm


def plain_tokens(backend, models, prompts, max_new_tokens):
    llm = make(backend, models, draft=False)
    out = llm.generate(prompts, SamplingParams(max_new_tokens=max_new_tokens, ignore_eos=True))
    return [list(o.token_ids) for o in out]


def test_max_new_tokens_is_exact_even_when_a_path_overshoots(backend, models):
    llm = make(backend, models)
    expected = plain_tokens(backend, models, PROMPTS, 40)
    for limit in (1, 2, 7, 13):
        out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=limit))
        assert [list(o.token_ids) for o in out] == [e[:limit] for e in expected]
        assert all(o.finish_reason is FinishReason.LENGTH for o in out)
    assert max(o.accept_length for o in out) > 2.0  # paths were long enough to overshoot
    assert llm.used_pages == 0


def test_stop_token_inside_an_accepted_path(backend, models):
    expected = plain_tokens(backend, models, PROMPTS, 30)
    for index, tokens in enumerate(expected):
        stop = tokens[5]  # a token emitted mid-output
        first = tokens.index(stop)
        llm = make(backend, models)
        (out,) = llm.generate([PROMPTS[index]],
                              SamplingParams(max_new_tokens=30, stop_token_ids=(stop,)))
        assert list(out.token_ids) == tokens[:first]  # the stop token is not output
        assert out.finish_reason is FinishReason.STOP
        assert llm.used_pages == 0


def test_eos_inside_an_accepted_path(backend, models):
    expected = plain_tokens(backend, models, PROMPTS, 30)
    eos = expected[0][8]
    target = near_bigram_target(seed=5, eos=(eos,))
    llm = LLM.from_models(backend, target, matching_eagle1(target, noise=0.02), spec=SPEC)
    out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=30))
    for o, tokens in zip(out, expected, strict=True):
        cut = tokens.index(eos) if eos in tokens else len(tokens)
        assert list(o.token_ids) == tokens[:cut]
        assert o.finish_reason is (FinishReason.STOP if eos in tokens else FinishReason.LENGTH)
    ignoring = llm.generate(PROMPTS, SamplingParams(max_new_tokens=30, ignore_eos=True))
    assert [list(o.token_ids) for o in ignoring] == expected
    assert llm.used_pages == 0


def test_stop_string_cuts_text_where_plain_decoding_would(backend, models):
    tokenizer = CharTokenizer()
    expected = plain_tokens(backend, models, PROMPTS, 30)
    for index, tokens in enumerate(expected):
        text = tokenizer.decode(tokens)
        stop = text[6:8]
        cut = text.index(stop)
        llm = make(backend, models, tokenizer=tokenizer)
        (out,) = llm.generate([PROMPTS[index]], SamplingParams(max_new_tokens=30, stop=(stop,)))
        assert out.text == text[:cut]
        assert out.finish_reason is FinishReason.STOP
        # the token that completed the stop string is the last one kept
        assert list(out.token_ids) == tokens[: cut + len(stop)]
        assert llm.used_pages == 0


def test_streaming_concatenates_to_the_final_output(backend, models):
    llm = make(backend, models, tokenizer=CharTokenizer())
    params = SamplingParams(max_new_tokens=25)
    texts: dict[int, str] = {}
    ids: dict[int, list[int]] = {}
    finished = set()
    for delta in llm.stream(PROMPTS, params):
        assert delta.request_id not in finished
        texts[delta.request_id] = texts.get(delta.request_id, "") + delta.text
        ids.setdefault(delta.request_id, []).extend(delta.token_ids)
        if delta.finished:
            finished.add(delta.request_id)
    outputs = llm.last_outputs
    assert len(finished) == len(PROMPTS)
    for o in outputs:
        assert texts[o.request_id] == o.text
        assert ids[o.request_id] == list(o.token_ids)
    assert [list(o.token_ids) for o in outputs] == plain_tokens(backend, models, PROMPTS, 25)
    assert llm.used_pages == 0


def test_cancellation_frees_everything_and_spares_the_others(backend, models):
    llm = make(backend, models)
    expected = plain_tokens(backend, models, PROMPTS, 30)
    stream = llm.stream(PROMPTS, SamplingParams(max_new_tokens=30))
    got: dict[int, list[int]] = {}
    victim = None
    for delta in stream:
        got.setdefault(delta.request_id, []).extend(delta.token_ids)
        if victim is None and len(got) == len(PROMPTS):
            victim = delta.request_id
            llm.engine.cancel(victim)
    assert llm.used_pages == 0
    for rid, tokens in zip(sorted(got), expected, strict=True):
        if rid == victim:
            assert len(got[rid]) < 30 and got[rid] == tokens[: len(got[rid])]
        else:
            assert got[rid] == tokens


def test_closing_a_stream_early_cancels_and_frees(backend, models):
    llm = make(backend, models)
    stream = llm.stream(PROMPTS, SamplingParams(max_new_tokens=30))
    next(stream)
    assert llm.used_pages > 0
    stream.close()
    assert llm.used_pages == 0
    out = llm.generate(PROMPTS[:1], SamplingParams(max_new_tokens=5))  # still usable
    assert len(out[0].token_ids) == 5


@pytest.mark.parametrize("page_size", [1, 4])
def test_kv_exhaustion_preempts_and_resumes_losslessly(backend, models, page_size):
    prompts = [p * 2 for p in PROMPTS] * 2
    expected = plain_tokens(backend, models, prompts, 40)
    llm = make(backend, models, kv_cache_tokens=160, page_size=page_size, max_batch_size=10)
    out = llm.generate(prompts, SamplingParams(max_new_tokens=40))
    assert [list(o.token_ids) for o in out] == expected
    assert sum(o.stats.preemptions for o in out) > 0  # the cache really ran out
    assert llm.used_pages == 0 and llm.leaked_pages == 0


def test_request_that_can_never_fit_is_rejected_not_crashed(backend, models):
    llm = make(backend, models, kv_cache_tokens=48, max_batch_size=2, max_context=512)
    small, huge = PROMPTS[0], list(range(1, 50)) * 2  # 98 tokens > the whole cache
    out = llm.generate([huge, small], SamplingParams(max_new_tokens=10))
    assert out[0].finish_reason is FinishReason.ERROR and out[0].error
    assert "KV" in out[0].error or "cache" in out[0].error
    assert list(out[1].token_ids) == plain_tokens(backend, models, [small], 10)[0]
    assert llm.used_pages == 0


def test_prompt_longer_than_the_context_is_an_error(backend, models):
    llm = make(backend, models, max_context=64)
    with pytest.raises(PromptTooLong, match="64"):
        llm.generate([[1] * 64], SamplingParams(max_new_tokens=4))
    with pytest.raises(ValueError):
        llm.generate([[]], SamplingParams(max_new_tokens=4))
    assert llm.used_pages == 0


def test_generation_stops_at_the_end_of_the_context(backend, models):
    llm = make(backend, models, max_context=40)
    (out,) = llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=100, ignore_eos=True))
    # the context's own reason, not the token budget's
    assert out.finish_reason is FinishReason.CONTEXT_FULL
    assert len(PROMPTS[0]) + len(out.token_ids) == 40
    assert list(out.token_ids) == plain_tokens(backend, models, [PROMPTS[0]], 100)[0][:35]
    assert llm.used_pages == 0


def test_per_request_statistics(backend, models):
    llm = make(backend, models)
    out = llm.generate(PROMPTS, SamplingParams(max_new_tokens=20))
    for o in out:
        s = o.stats
        assert s.prompt_tokens > 0 and s.output_tokens == len(o.token_ids) == 20
        # prefill emits one token; every verify pass emits accept_length of them
        assert s.accepted_tokens == s.output_tokens - 1 or s.accepted_tokens >= s.output_tokens - 1
        assert s.verify_steps >= 1 and 1.0 <= o.accept_length <= SPEC.num_steps + 1
        assert s.time_to_first_token is not None and s.time_to_first_token >= 0
        assert s.decode_tokens_per_s > 0


class ByteTokenizer:
    """Token i is a chunk of bytes: the two halves of "é" alone, and chunks that end or
    start inside it around other characters, so characters span tokens and a token can
    complete text and begin a partial character at once; ``decode`` is UTF-8 with
    replacement (an incomplete or broken sequence reads U+FFFD), and with
    ``drop_leading_space`` it drops a leading space as SentencePiece decoders do. Counts the
    ids it decodes."""

    CHUNKS = (b"\xc3", b"\xa9", b"a", b" ", b"\n\xc3", b"\xa9b")
    eos_token_ids = ()

    def __init__(self, drop_leading_space: bool = False) -> None:
        self.drop_leading_space = drop_leading_space
        self.decoded_ids = 0

    def decode(self, token_ids):
        self.decoded_ids += len(token_ids)
        data = b"".join(self.CHUNKS[t % len(self.CHUNKS)] for t in token_ids)
        text = data.decode("utf-8", errors="replace")
        return text[1:] if self.drop_leading_space and text.startswith(" ") else text


def whole_decode_stop(tokenizer, tokens, stop, max_new_tokens):
    """The oracle: decode every prefix whole; the first that contains ``stop`` ends the
    output there (text cut before it), else ``max_new_tokens`` does."""
    for k in range(1, len(tokens) + 1):
        text = tokenizer.decode(tokens[:k])
        if stop in text:
            return tokens[:k], text[: text.index(stop)], FinishReason.STOP
        if k == max_new_tokens:
            return tokens[:k], text, FinishReason.LENGTH
    raise AssertionError("the plain tokens end before max_new_tokens")


@pytest.mark.parametrize("drop_leading_space", [False, True])
def test_text_is_decoded_incrementally_and_equals_the_whole_decode(backend, models,
                                                                   drop_leading_space):
    """Outputs whose characters span tokens (and break: the model's bytes are not always
    valid UTF-8): the final text equals decoding all the output ids at once (the oracle),
    and streamed deltas add up to it."""
    tokenizer = ByteTokenizer(drop_leading_space)
    llm = make(backend, models, tokenizer=tokenizer)
    params = SamplingParams(max_new_tokens=200, ignore_eos=True)
    streamed: dict[int, str] = {}
    for delta in llm.stream(PROMPTS[:2], params):
        streamed[delta.request_id] = streamed.get(delta.request_id, "") + delta.text
    reference = ByteTokenizer(drop_leading_space)
    for out in llm.last_outputs:
        assert len(out.token_ids) == 200
        assert out.text == reference.decode(list(out.token_ids))
        assert streamed[out.request_id] == out.text
    assert any("é" in o.text for o in llm.last_outputs)
    assert any("\ufffd" in o.text for o in llm.last_outputs)
    assert llm.used_pages == 0


def test_decoding_work_grows_linearly_with_the_output():
    """Valid UTF-8 split across tokens, 600 tokens: a few short windows per token are
    decoded (decoding the whole output at every token would pass about n^2 / 2 = 180,000
    ids to the tokenizer), and the text equals the whole decode."""
    from eagle_hal.engine.request import Request
    from eagle_hal.engine.stopping import append_tokens

    tokenizer = ByteTokenizer()
    tokens = [0, 1, 2, 3, 4, 5] * 100  # "é", "a", " ", "\né", "b": always valid in the end
    request = Request(0, [1], SamplingParams(max_new_tokens=1000, ignore_eos=True))
    for token in tokens:
        append_tokens(request, [token], tokenizer)
    assert tokenizer.decoded_ids < 8 * len(tokens)
    assert request.text == ByteTokenizer().decode(tokens)


def test_a_stop_string_split_across_held_back_bytes_still_cuts(backend, models):
    """Stop strings around partial characters: one ending in the multi-byte character
    (complete only once its last byte arrives) and "\n", which arrives in the same token
    as the first byte of a character (held back). Text, finish reason and the tokens kept
    (up to the one that completed the stop string) are those of whole decodes of every
    prefix (``whole_decode_stop``); also when the request ends by length with text held
    back."""
    tokenizer = ByteTokenizer()
    expected = plain_tokens(backend, models, PROMPTS, 60)
    checked = set()
    for index, tokens in enumerate(expected):
        text = tokenizer.decode(tokens)
        stops = ["\n"] if "\n" in text else []
        starts = [i for i, ch in enumerate(text) if ch == "é" and i >= 2]
        stops += [text[starts[0] - 2 : starts[0] + 1]] if starts else []
        for stop in stops:
            for limit in (60, tokens.index(next(t for t in tokens if t % 6 == 4)) + 1):
                want = whole_decode_stop(tokenizer, tokens, stop, limit)
                llm = make(backend, models, tokenizer=ByteTokenizer())
                params = SamplingParams(max_new_tokens=limit, stop=(stop,))
                (out,) = llm.generate([PROMPTS[index]], params)
                assert (list(out.token_ids), out.text, out.finish_reason) == want
                checked.add((stop == "\n", want[2]))
    # every kind met: "\n" and a wide stop string, a stop and a length finish
    assert {(True, FinishReason.STOP), (False, FinishReason.STOP)} <= checked
    assert any(reason is FinishReason.LENGTH for _, reason in checked)


def test_uploaded_views_start_on_16_byte_boundaries():
    """``ModelRunner.upload`` packs lists of any lengths into one copy; every view holds its
    list and starts 16-byte aligned (Triton specialises kernels on pointer alignment, so
    length-dependent offsets compiled new kernel variants mid-run)."""
    import torch

    target = near_bigram_target(seed=1)
    llm = LLM.from_models(select_backend("cpu"), target, None, spec=SpecConfig(num_steps=0))
    lists = [[5], [], [1, 2, 3], [7, 8], [9], [4, 4, 4, 4, 4]]
    views = llm.runner.upload(*lists)
    assert [v.tolist() for v in views] == lists
    assert all(v.dtype == torch.int64 and v.data_ptr() % 16 == 0 for v in views if v.numel())
