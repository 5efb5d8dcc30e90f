"""Gemma 3 (text) against Hugging Face transformers' ``Gemma3ForCausalLM`` on a tiny random
``Gemma3TextConfig``: embeddings scaled by sqrt(hidden), ``1 + w`` RMSNorms before and
after attention and MLP, per-head q/k norms, GELU-tanh gated MLP, local layers rotating
with ``rope_local_base_freq`` and global ones with ``rope_theta``, a query scale from
``query_pre_attn_scalar``, tied embeddings.

Oracle: transformers' forward over each whole sequence in float32 (atol 1e-4). Sequences
stay within the sliding window: eagle-hal attends over the whole context, which is exact
there, and caps an engine's context at the window (checked here too).
"""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.loading.hf import load_hf_model

ATOL = 1e-4
WINDOW = 24
LAYER_TYPES = ["sliding_attention", "full_attention", "sliding_attention", "sliding_attention"]


def save_gemma(directory, seed: int = 0, **overrides):
    import transformers

    torch.manual_seed(seed)
    config = transformers.Gemma3TextConfig(**{
        "vocab_size": 97, "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "query_pre_attn_scalar": 24, "sliding_window": WINDOW, "layer_types": LAYER_TYPES,
        "max_position_embeddings": 512, "rope_parameters": {
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
        **overrides})
    model = transformers.Gemma3ForCausalLM(config).float().eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            # HF norm weights are w of a 1 + w scale: random around 0
            param.copy_(noise * (0.3 if name.endswith("norm.weight") else
                                 0.2 if "embed" in name else 0.05))
    model.save_pretrained(directory, safe_serialization=True)
    return model


def hf_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()


def prompts(lengths, seed):
    rng = random.Random(seed)
    return [[rng.randrange(97) for _ in range(n)] for n in lengths]


def test_config_reads_gemma_fields(tmp_path):
    save_gemma(tmp_path)
    config = load_hf_model(tmp_path, progress=False).config
    assert config.architecture == "gemma3" and config.activation == "gelu_tanh"
    assert config.sliding_layers == (0, 2, 3) and config.local_rope_theta == 10000.0
    assert config.rope_theta == 1000000.0 and config.tie_word_embeddings
    assert config.embedding_scale == pytest.approx(8.0)
    assert config.attention_scale == pytest.approx(24**-0.5)
    assert config.max_context_len == 512 and config.unwindowed_context_len == WINDOW
    assert config.layer_windows == (WINDOW, None, WINDOW, WINDOW)


def test_prefill_logits_and_hidden_states_equal_hf(tmp_path, runtime_for):
    hf_model = save_gemma(tmp_path, seed=1)
    model = load_hf_model(tmp_path, progress=False)
    runtime = runtime_for(model.config)
    batch_prompts = prompts([7, 1, WINDOW], seed=2)
    rows = [runtime.new_request() for _ in batch_prompts]
    with torch.no_grad():
        out = model(runtime.causal_batch(rows, batch_prompts), runtime.backend,
                    aux_layers=(1, 3))
        logits = model.compute_logits(out.hidden_states)
    start = 0
    for prompt in batch_prompts:
        with torch.no_grad():
            hf_out = hf_model.model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
        stop = start + len(prompt)
        torch.testing.assert_close(logits[start:stop], hf_logits(hf_model, prompt),
                                   atol=ATOL, rtol=0)
        for index, aux in zip((1, 3), out.aux_hidden_states, strict=True):
            torch.testing.assert_close(aux[start:stop], hf_out.hidden_states[index][0],
                                       atol=ATOL, rtol=0)
        start = stop


@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_decode_after_prefill_equals_hf(page_size, tmp_path, runtime_for):
    hf_model = save_gemma(tmp_path, seed=page_size)
    model = load_hf_model(tmp_path, progress=False)
    runtime = runtime_for(model.config, page_size=page_size)
    sequences = prompts([5, 13], seed=page_size)
    rows = [runtime.new_request() for _ in sequences]
    rng = random.Random(page_size)
    with torch.no_grad():
        model(runtime.causal_batch(rows, sequences), runtime.backend)
        for _ in range(4):
            step = [[rng.randrange(97)] for _ in rows]
            batch = runtime.causal_batch(rows, step, mode=ForwardMode.DECODE)
            logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
            for i, token in enumerate(step):
                sequences[i] = sequences[i] + token
                torch.testing.assert_close(logits[i], hf_logits(hf_model, sequences[i])[-1],
                                           atol=ATOL, rtol=0)


def test_fused_for_inference_equals_hf(tmp_path, runtime_for):
    """Fused gate/up with the reference kernels: the GELU-tanh activation still applies."""
    from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

    hf_model = save_gemma(tmp_path, seed=7)
    model = load_hf_model(tmp_path, progress=False)
    model.fuse_for_inference(REFERENCE_MODEL_KERNELS)
    runtime = runtime_for(model.config)
    prompt = prompts([11], seed=7)[0]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_the_engine_runs_past_the_window_as_hf(tmp_path):
    """An engine over a Gemma target on a backend that applies windows runs past the
    sliding window, emitting HF's greedy continuation."""
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig

    hf_model = save_gemma(tmp_path, seed=3)
    model = load_hf_model(tmp_path, progress=False)
    llm = LLM.from_models(select_backend("cpu"), model, None, spec=SpecConfig(num_steps=0),
                          max_context=256)
    assert llm.scheduler.config.max_context == 256
    prompt = prompts([WINDOW + 6], seed=3)[0]
    out = llm.generate([prompt], SamplingParams(max_tokens=6, ignore_eos=True))[0]
    sequence = list(prompt)
    for _ in range(6):  # HF's greedy continuation, one full recompute per token
        sequence.append(int(hf_logits(hf_model, sequence)[-1].argmax()))
    assert list(out.token_ids) == sequence[len(prompt):]


def test_installed_gelu_tanh_kernel_is_the_one_called(tmp_path, runtime_for):
    """Kernels with a ``gelu_tanh_mul`` have it called for every fused Gemma MLP (one call
    per layer per forward); the logits stay HF's."""
    import dataclasses

    from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

    calls = []

    def gelu_tanh_mul(gate_up):
        calls.append(gate_up.shape)
        gate, up = gate_up.chunk(2, dim=-1)
        return torch.nn.functional.gelu(gate, approximate="tanh") * up

    hf_model = save_gemma(tmp_path, seed=9)
    model = load_hf_model(tmp_path, progress=False)
    model.fuse_for_inference(dataclasses.replace(REFERENCE_MODEL_KERNELS,
                                                 gelu_tanh_mul=gelu_tanh_mul))
    runtime = runtime_for(model.config)
    prompt = prompts([6], seed=9)[0]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    assert calls == [torch.Size([6, 2 * 96])] * 4
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


@pytest.mark.parametrize("variant", [1, 3])
def test_speculative_greedy_equals_plain_on_gemma(variant, tmp_path, eagle_ckpt):
    """A random head of a published layout (SafeAILab EAGLE-1, SpecForge EAGLE-3) drafting
    for the tiny Gemma target: greedy speculative decoding emits plain decoding's tokens."""
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.model.loading import load_eagle_head
    from eagle_hal.speculative.config import SpecConfig

    save_gemma(tmp_path / "target", seed=4)
    target = load_hf_model(tmp_path / "target", progress=False)
    write = eagle_ckpt.write_eagle3 if variant == 3 else eagle_ckpt.write_eagle1
    write(tmp_path / "head", seed=5)
    head = load_eagle_head(tmp_path / "head", target)
    backend = select_backend("cpu")
    batch = prompts([5, 9], seed=6)
    params = SamplingParams(max_tokens=10, ignore_eos=True)
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0))
    expected = [list(o.token_ids) for o in plain.generate(batch, params)]
    for spec in (SpecConfig(3, 1), SpecConfig(2, 2, 4)):
        speculative = LLM.from_models(backend, target, head, spec=spec)
        assert [list(o.token_ids) for o in speculative.generate(batch, params)] == expected
