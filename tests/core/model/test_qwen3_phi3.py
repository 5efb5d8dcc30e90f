"""Qwen3 (per-head q/k RMSNorm) and Phi-3 (fused qkv_proj and gate_up_proj in the
checkpoint) against Hugging Face transformers' own models, on tiny random configs.

Oracle: transformers' ``Qwen3ForCausalLM`` / ``Phi3ForCausalLM`` forward over each whole
sequence (dense causal attention, no cache) in float32, built from transformers' own config
classes and saved with ``save_pretrained``; our model loads the directory through our
loader and runs paged through the reference backend. Tolerance: atol 1e-4. Speculative
decoding with a random head of a published layout must emit plain greedy decoding's tokens.
"""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.errors import TensorShapeMismatch, UnsupportedModelError
from eagle_hal.model.loading import load_eagle_head
from eagle_hal.model.loading.hf import load_hf_model
from safetensors.torch import load_file, save_file

ATOL = 1e-4
TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
            bos_token_id=1, eos_token_id=2, pad_token_id=0)


def save_hf(kind: str, directory, seed: int = 0, **overrides):
    import transformers

    config_class, model_class = {
        "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM),
        "phi3": (transformers.Phi3Config, transformers.Phi3ForCausalLM),
    }[kind]
    torch.manual_seed(seed)
    config = {**TINY, **({"head_dim": 32} if kind == "qwen3" else {}), **overrides}
    model = model_class(config_class(**config)).float().eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if name.endswith("norm.weight"):
                param.copy_(1 + 0.2 * noise)
            else:
                param.copy_(noise * (0.2 if "embed" in name else 0.05))
    model.save_pretrained(directory, safe_serialization=True)
    return model


def hf_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()


def prompts(lengths, seed):
    rng = random.Random(seed)
    return [[rng.randrange(TINY["vocab_size"]) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("kind", ["qwen3", "phi3"])
def test_checkpoint_layout_is_what_the_family_ships(kind, tmp_path):
    """The saved checkpoints hold the tensors that make the family: Qwen3's q_norm/k_norm
    over head_dim, Phi-3's fused projections and no separate ones."""
    save_hf(kind, tmp_path)
    names = set(load_file(str(tmp_path / "model.safetensors")))
    if kind == "qwen3":
        assert "model.layers.0.self_attn.q_norm.weight" in names
        model = load_hf_model(tmp_path, progress=False)
        assert model.config.qk_norm and model.config.head_dim == 32
        assert model.model.layers[0].self_attn.q_norm.weight.shape == (32,)
    else:
        assert "model.layers.0.self_attn.qkv_proj.weight" in names
        assert "model.layers.0.mlp.gate_up_proj.weight" in names
        assert "model.layers.0.self_attn.q_proj.weight" not in names
        assert not load_hf_model(tmp_path, progress=False).config.qk_norm


@pytest.mark.parametrize("kind", ["qwen3", "phi3"])
def test_ragged_prefill_logits_equal_hf(kind, tmp_path, runtime_for):
    hf_model = save_hf(kind, tmp_path, seed=3)
    model = load_hf_model(tmp_path, progress=False)
    runtime = runtime_for(model.config)
    batch_prompts = prompts([7, 1, 12], seed=1)
    rows = [runtime.new_request() for _ in batch_prompts]
    with torch.no_grad():
        out = model(runtime.causal_batch(rows, batch_prompts), runtime.backend)
        logits = model.compute_logits(out.hidden_states)
    start = 0
    for prompt in batch_prompts:
        expected = hf_logits(hf_model, prompt)
        torch.testing.assert_close(logits[start:start + len(prompt)], expected, atol=ATOL, rtol=0)
        start += len(prompt)


@pytest.mark.parametrize("page_size", [1, 16, 128])
@pytest.mark.parametrize("kind", ["qwen3", "phi3"])
def test_decode_after_prefill_equals_hf(kind, page_size, tmp_path, runtime_for):
    """Prefill, then DECODE steps over a paged cache of ``page_size``: each step's logits
    equal HF's full recompute of the sequence so far."""
    hf_model = save_hf(kind, tmp_path, seed=page_size)
    model = load_hf_model(tmp_path, progress=False)
    runtime = runtime_for(model.config, page_size=page_size)
    sequences = prompts([5, 9], seed=page_size)
    rows = [runtime.new_request() for _ in sequences]
    rng = random.Random(page_size)
    with torch.no_grad():
        model(runtime.causal_batch(rows, sequences), runtime.backend)
        for _ in range(4):
            step = [[rng.randrange(TINY["vocab_size"])] for _ in rows]
            batch = runtime.causal_batch(rows, step, mode=ForwardMode.DECODE)
            logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
            for i, token in enumerate(step):
                sequences[i] = sequences[i] + token
                torch.testing.assert_close(logits[i], hf_logits(hf_model, sequences[i])[-1],
                                           atol=ATOL, rtol=0)


def test_qwen3_fused_for_inference_equals_hf(tmp_path, runtime_for):
    """Fused Q/K/V with the reference kernels installed: the q/k norm still applies."""
    from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

    hf_model = save_hf("qwen3", tmp_path, seed=8)
    model = load_hf_model(tmp_path, progress=False)
    model.fuse_for_inference(REFERENCE_MODEL_KERNELS)
    runtime = runtime_for(model.config)
    prompt = prompts([10], seed=8)[0]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_phi3_fused_tensor_of_the_wrong_size_is_named(tmp_path):
    save_hf("phi3", tmp_path)
    tensors = load_file(str(tmp_path / "model.safetensors"))
    name = "model.layers.1.mlp.gate_up_proj.weight"
    tensors[name] = tensors[name][:-2].contiguous()
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "pt"})
    with pytest.raises(TensorShapeMismatch, match=r"gate_up_proj.*\[190, 64\].*\[192, 64\]"):
        load_hf_model(tmp_path, progress=False)


def test_partial_rotary_phi_is_refused(tmp_path):
    import json

    save_hf("phi3", tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    config.setdefault("rope_parameters", {})["partial_rotary_factor"] = 0.75
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="partial_rotary_factor 0.75"):
        load_hf_model(tmp_path, progress=False)


@pytest.mark.parametrize(("kind", "variant"), [("qwen3", 3), ("phi3", 1), ("qwen3", 1)])
def test_speculative_greedy_equals_plain_with_a_published_layout_head(kind, variant, tmp_path,
                                                                      eagle_ckpt):
    """A random head written in a published layout (EAGLE-3 SpecForge, EAGLE-1 SafeAILab)
    drafts for the target; greedy speculative decoding (chain and tree) emits exactly the
    tokens of plain greedy decoding, one target forward per token."""
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig

    save_hf(kind, tmp_path / "target", seed=5)
    target = load_hf_model(tmp_path / "target", progress=False)
    if variant == 3:
        eagle_ckpt.write_eagle3(tmp_path / "head", seed=6)
    else:
        eagle_ckpt.write_eagle1(tmp_path / "head", seed=6)
    head = load_eagle_head(tmp_path / "head", target)
    backend = select_backend("cpu")
    batch = prompts([6, 11], seed=9)
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0),
                            max_batch_size=4)
    expected = [o.token_ids for o in plain.generate(batch, params)]
    assert all(len(ids) == 16 for ids in expected)
    for spec in (SpecConfig(3, 1), SpecConfig(3, 2, 6)):
        speculative = LLM.from_models(backend, target, head, spec=spec, max_batch_size=4)
        assert [o.token_ids for o in speculative.generate(batch, params)] == expected
        assert speculative.used_pages == 0
