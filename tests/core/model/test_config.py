"""ModelConfig normalisation of Hugging Face config dicts (v4 and v5 spellings)."""

from __future__ import annotations

import pytest
from eagle_hal.model.config import ModelConfig, RopeScaling, RopeScalingKind
from eagle_hal.model.errors import UnsupportedModelError

BASE = {"vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 2, "num_attention_heads": 8, "num_key_value_heads": 2}


def test_smollm2_style_llama_config():
    """A SmolLM2 config.json (Llama arch, tied, v4 rope_theta) normalises field by field."""
    raw = {**BASE, "architectures": ["LlamaForCausalLM"], "tie_word_embeddings": True,
           "rope_theta": 100000.0, "rms_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 2,
           "max_position_embeddings": 8192}
    c = ModelConfig.from_hf_config(raw)
    assert (c.architecture, c.head_dim, c.num_kv_heads, c.tie_word_embeddings) == (
        "llama", 8, 2, True)
    assert (c.rope_theta, c.rope_scaling, c.rms_norm_eps) == (100000.0, RopeScaling(), 1e-5)
    assert (c.bos_token_id, c.eos_token_ids, c.max_context_len) == (1, (2,), 8192)
    assert not c.attention_bias and not c.attention_out_bias


@pytest.mark.parametrize("spelling", ["v4", "v5"])
def test_llama3_rope_scaling_both_spellings(spelling):
    """llama3 scaling is read from rope_scaling+rope_theta (v4) or rope_parameters (v5)."""
    scaling = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}
    if spelling == "v4":
        raw = {**BASE, "architectures": ["LlamaForCausalLM"], "rope_theta": 500000.0,
               "rope_scaling": scaling, "eos_token_id": [128001, 128008, 128009]}
    else:
        raw = {**BASE, "model_type": "llama",
               "rope_parameters": {**scaling, "rope_theta": 500000.0},
               "eos_token_id": [128001, 128008, 128009]}
    c = ModelConfig.from_hf_config(raw)
    assert c.rope_theta == 500000.0
    assert c.rope_scaling == RopeScaling(RopeScalingKind.LLAMA3, 8.0, 1.0, 4.0, 8192)
    assert c.eos_token_ids == (128001, 128008, 128009)


def test_qwen2_has_qkv_bias_and_ignores_unused_sliding_window():
    """Qwen2: q/k/v bias but no o_proj bias; sliding_window unused unless enabled."""
    raw = {**BASE, "architectures": ["Qwen2ForCausalLM"], "sliding_window": 32,
           "use_sliding_window": False}
    c = ModelConfig.from_hf_config(raw)
    assert (c.architecture, c.attention_bias, c.attention_out_bias) == ("qwen2", True, False)
    assert c.sliding_window is None


def test_mistral_sliding_window_caps_the_context():
    """Mistral's sliding window reaches every layer's attention; the context runs to
    max_position_embeddings, and only a backend without windows stops at the window."""
    raw = {**BASE, "architectures": ["MistralForCausalLM"], "sliding_window": 4096,
           "max_position_embeddings": 32768}
    c = ModelConfig.from_hf_config(raw)
    assert (c.architecture, c.sliding_window, c.max_context_len) == ("mistral", 4096, 32768)
    assert c.layer_windows == (4096,) * c.num_layers and c.unwindowed_context_len == 4096


def test_llama_attention_bias_covers_o_proj():
    """Llama's attention_bias puts a bias on q/k/v and o_proj."""
    c = ModelConfig.from_hf_config({**BASE, "model_type": "llama", "attention_bias": True})
    assert c.attention_bias and c.attention_out_bias


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"architectures": ["GPT2LMHeadModel"]}, "GPT2LMHeadModel is not supported; supported"),
        ({"model_type": "gpt_neox"}, "gpt_neox is not supported"),
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"mlp_bias": True}, "mlp_bias"),
        ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling type 'yarn'"),
    ],
)
def test_unsupported_features_raise(change, message):
    """Unsupported architectures and features raise UnsupportedModelError naming them."""
    raw = {**BASE, "model_type": "llama", **change}
    with pytest.raises(UnsupportedModelError, match=message):
        ModelConfig.from_hf_config(raw)


def test_invalid_geometry_is_rejected():
    """Heads not divisible by KV heads, odd head_dim, bad factor: ValueError."""
    with pytest.raises(ValueError, match="multiple of num_kv_heads"):
        ModelConfig.from_hf_config({**BASE, "model_type": "llama", "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="even head_dim"):
        ModelConfig.from_hf_config({**BASE, "model_type": "llama", "head_dim": 7})
    with pytest.raises(ValueError, match="factor"):
        RopeScaling(RopeScalingKind.LINEAR, factor=0.0)


def test_config_is_frozen():
    """ModelConfig is immutable."""
    c = ModelConfig.from_hf_config({**BASE, "model_type": "llama"})
    with pytest.raises(AttributeError):
        c.hidden_size = 3  # type: ignore[misc]
