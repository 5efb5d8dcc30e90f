"""The early-exit self-drafter and the standalone draft model through the verify path.

Greedy: token for token what plain decoding emits (float32, CPU). At temperature > 0: the
chi-square test of ``test_lossless_sampling`` against the exact distribution enumerated
with HF transformers. No smaller model shares a tokenizer with the test targets, so the
standalone path drafts with a truncated copy of the target (its first layers, written as a
separate model directory and read back through the loaders); its proposals must then be
exactly the self-drafter's at the same depth, an independent check of its own KV.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.errors import InvalidArgument
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.draft_model import (
    DraftModelDrafter,
    TokenizerMismatch,
    check_same_tokenizer,
)
from eagle_hal.speculative.self_draft import SelfDrafter
from eagle_hal.testing.models import tiny_target


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


def deep_near_bigram(seed: int = 5, vocab: int = 61, layers: int = 4) -> LlamaForCausalLM:
    """A near-bigram target (``testing.models.near_bigram_target``) of ``layers`` layers:
    an early exit guesses its greedy choice often, so drafts are accepted."""
    model = tiny_target(seed, vocab, layers=layers)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(0.02)
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)
    return model


def truncated(target: LlamaForCausalLM, layers: int) -> LlamaForCausalLM:
    """The target's first ``layers`` layers, final norm and lm_head as a model of its own."""
    model = LlamaForCausalLM(dataclasses.replace(target.config, num_layers=layers))
    state = {k: v for k, v in target.state_dict().items()
             if not k.startswith("model.layers.") or int(k.split(".")[2]) < layers}
    model.load_state_dict(state, strict=False)
    return model


class Recording:
    """A drafter wrapper keeping every batch's proposals."""

    def __init__(self, inner) -> None:
        self.inner, self.batches = inner, []
        self.on_device, self.topk = inner.on_device, inner.topk

    def bind(self, runner):
        self.inner.bind(runner)

    def propose_requests(self, requests, shape):
        proposals = self.inner.propose_requests(requests, shape)
        self.batches.append([p.tokens for p in proposals])
        return proposals

    def observe(self, request_id, emitted):
        self.inner.observe(request_id, emitted)

    def release(self, request_id):
        self.inner.release(request_id)


PROMPTS = [[5, 9, 13, 2, 7], [3, 4, 3, 4, 3, 4, 3], [11, 12, 13, 14], [40]]


def plain(backend, target, prompts, params):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0), max_batch_size=8)
    return [o.token_ids for o in llm.generate(prompts, params)]


@pytest.mark.parametrize("layers, steps", [(1, 3), (2, 4), (3, 2)])
def test_self_draft_greedy_equals_plain_decoding(backend, layers, steps):
    target = deep_near_bigram()
    params = SamplingParams(temperature=0.0, max_tokens=30)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(steps), max_batch_size=8,
                          drafter=SelfDrafter(layers))
    outputs = llm.generate(PROMPTS, params)
    assert [o.token_ids for o in outputs] == plain(backend, target, PROMPTS, params)
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.2
    assert llm.leaked_pages == 0


def test_self_draft_on_a_random_target_and_page_size_4(backend):
    target = tiny_target(seed=3, layers=3)
    params = SamplingParams(temperature=0.0, max_tokens=24)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(3), max_batch_size=8,
                          page_size=4, drafter=SelfDrafter(2))
    got = [o.token_ids for o in llm.generate(PROMPTS, params)]
    assert got == plain(backend, target, PROMPTS, params)
    assert llm.leaked_pages == 0


def test_adaptive_controller_over_self_draft(backend):
    target = deep_near_bigram()
    params = SamplingParams(temperature=0.0, max_tokens=30)
    spec = SpecConfig(3, adaptive=True, adaptive_steps=(0, 2, 4))
    llm = LLM.from_models(backend, target, None, spec=spec, max_batch_size=8,
                          drafter=SelfDrafter(2))
    assert llm.worker.controller is not None
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == plain(
        backend, target, PROMPTS, params)


def test_draft_model_greedy_equals_plain_and_proposes_as_self_draft(backend):
    target = deep_near_bigram()
    params = SamplingParams(temperature=0.0, max_tokens=30)
    by_model, by_self = Recording(DraftModelDrafter(truncated(target, 2))), Recording(
        SelfDrafter(2))
    outputs = {}
    for name, drafter in (("model", by_model), ("self", by_self)):
        llm = LLM.from_models(backend, target, None, spec=SpecConfig(4), max_batch_size=8,
                              drafter=drafter)
        outputs[name] = [o.token_ids for o in llm.generate(PROMPTS, params)]
        assert llm.leaked_pages == 0
    assert outputs["model"] == outputs["self"] == plain(backend, target, PROMPTS, params)
    assert by_model.batches == by_self.batches  # its own KV holds what the target's does
    assert not by_model.inner._held  # released when the requests finished


def test_adaptive_controller_over_a_draft_model(backend):
    target = deep_near_bigram()
    params = SamplingParams(temperature=0.0, max_tokens=30)
    spec = SpecConfig(3, adaptive=True, adaptive_steps=(0, 2, 4))
    llm = LLM.from_models(backend, target, None, spec=spec, max_batch_size=8,
                          drafter=DraftModelDrafter(truncated(target, 1)))
    assert [o.token_ids for o in llm.generate(PROMPTS, params)] == plain(
        backend, target, PROMPTS, params)


# -- the standalone path through the loaders, and its tokenizer check ------------------------

def write_model(directory, model: LlamaForCausalLM, tokens: list[str]) -> None:
    """``model`` as a Hugging Face directory (config.json, safetensors, a word-level
    tokenizer.json of ``tokens``)."""
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, models

    c = model.config
    directory.mkdir()
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
              "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
              "intermediate_size": c.intermediate_size, "num_hidden_layers": c.num_layers,
              "num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads,
              "head_dim": c.head_dim, "rms_norm_eps": c.rms_norm_eps,
              "rope_theta": c.rope_theta, "max_position_embeddings": c.max_position_embeddings,
              "tie_word_embeddings": False, "hidden_act": "silu"}
    (directory / "config.json").write_text(json.dumps(config))
    save_file({k: v.contiguous() for k, v in model.state_dict().items()},
              str(directory / "model.safetensors"))
    vocab = {t: i for i, t in enumerate(tokens)}
    Tokenizer(models.WordLevel(vocab, unk_token=tokens[0])).save(str(directory / "tokenizer.json"))


TOKENS = [f"w{i}" for i in range(61)]


@pytest.fixture
def model_dirs(tmp_path):
    pytest.importorskip("tokenizers")
    target = deep_near_bigram()
    write_model(tmp_path / "target", target, TOKENS)
    write_model(tmp_path / "draft", truncated(target, 2), TOKENS)
    write_model(tmp_path / "other", truncated(target, 2), TOKENS[:7] + ["zz"] + TOKENS[8:])
    return tmp_path


def test_llm_with_a_draft_model_directory_equals_plain(model_dirs):
    params = SamplingParams(temperature=0.0, max_tokens=20)
    llm = LLM(model=str(model_dirs / "target"), draft=f"model:{model_dirs / 'draft'}",
              device="cpu", progress=False, dtype="float32", spec=SpecConfig(3))
    reference = LLM(model=str(model_dirs / "target"), draft=None, device="cpu",
                    progress=False, dtype="float32")
    got = [o.token_ids for o in llm.generate(PROMPTS, params)]
    assert got == [o.token_ids for o in reference.generate(PROMPTS, params)]
    assert isinstance(llm.drafter, DraftModelDrafter)


def test_a_draft_model_with_another_tokenizer_is_refused_before_loading(model_dirs,
                                                                          monkeypatch):
    import eagle_hal.model.loading as loading

    def no_load(*args, **kwargs):
        raise AssertionError("a weight was loaded")

    with pytest.raises(TokenizerMismatch) as caught:
        check_same_tokenizer(model_dirs / "other", model_dirs / "target")
    assert "token id 7" in str(caught.value) and "'zz'" in str(caught.value)
    monkeypatch.setattr(loading, "load_target", no_load)
    with pytest.raises(TokenizerMismatch):
        LLM(model=str(model_dirs / "target"), draft=f"model:{model_dirs / 'other'}",
            device="cpu", progress=False)


@pytest.mark.parametrize("draft", ["self:0", "self:", "self:x", "self:1,2", "model:", "model: "])
def test_llm_refuses_a_bad_headless_draft(draft):
    with pytest.raises(InvalidArgument) as caught:
        LLM(draft=draft, device="cpu", progress=False)
    assert caught.value.name == "draft"


def test_self_draft_needs_fewer_layers_than_the_target(backend):
    with pytest.raises(InvalidArgument) as caught:
        LLM.from_models(backend, tiny_target(layers=2), None, spec=SpecConfig(3),
                        drafter=SelfDrafter(2))
    assert caught.value.name == "draft" and "[1, 1]" in caught.value.allowed


# -- temperature > 0: the law of the emitted tokens ------------------------------------------

@pytest.mark.parametrize("kind", ["self", "model"])
def test_sampling_matches_the_target_distribution(backend, kind):
    pytest.importorskip("transformers")
    import test_lossless_sampling as law

    target = tiny_target(seed=11, vocab=law.VOCAB, layers=3)
    hf = law.hf_copy(target)
    params = SamplingParams(temperature=0.9, max_tokens=law.LENGTH)
    drafter = SelfDrafter(1) if kind == "self" else DraftModelDrafter(truncated(target, 2))
    recording = Recording(drafter)
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(2), seed=2024,
                          max_batch_size=64, drafter=recording)
    counts = law.sample(llm, params)
    p_value = law.chi_square_p_value(counts, law.exact_distribution(hf, params), law.SAMPLES)
    assert p_value > law.ALPHA, f"chi-square p = {p_value:.2e}"
    assert any(any(tokens) for batch in recording.batches for tokens in batch)
