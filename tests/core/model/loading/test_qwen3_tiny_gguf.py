"""A tiny Qwen3 written as llama.cpp writes Qwen3 GGUF files (``qwen3`` metadata, explicit
``key_length``, ``attn_q_norm`` / ``attn_k_norm`` per layer, Q/K rows in Hugging Face
order), read back by eagle-hal. Oracle: the transformers ``Qwen3ForCausalLM`` whose weights
were written (float32 logits, atol 1e-4)."""

from __future__ import annotations

import random

import pytest
import torch
from gguf_layout import write_tensors

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

ATOL = 1e-4
NAMES = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
         "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
         "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
         "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def test_qwen3_gguf_logits_equal_the_written_model(tmp_path, runtime_for):
    from eagle_hal.model.loading.gguf import load_gguf_model

    torch.manual_seed(0)
    config = transformers.Qwen3Config(
        vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, head_dim=32, rms_norm_eps=1e-6,
        max_position_embeddings=256, tie_word_embeddings=False, bos_token_id=1,
        eos_token_id=2, pad_token_id=0)
    hf_model = transformers.Qwen3ForCausalLM(config).float().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in hf_model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else noise * 0.05)
    path = tmp_path / "tiny-qwen3.gguf"
    writer = gguf.GGUFWriter(str(path), arch="qwen3")
    writer.add_block_count(3)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(96)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_key_length(32)
    writer.add_value_length(32)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_vocab_size(97)
    write_tensors(writer, ((name, t.numpy()) for name, t in hf_model.state_dict().items()), NAMES)

    model = load_gguf_model(path, progress=False)
    assert model.config.architecture == "qwen3" and model.config.qk_norm
    runtime = runtime_for(model.config, page_size=16)
    rng = random.Random(2)
    prompts = [[rng.randrange(97) for _ in range(n)] for n in (5, 12)]
    rows = [runtime.new_request() for _ in prompts]
    with torch.no_grad():
        out = model(runtime.causal_batch(rows, prompts), runtime.backend)
        logits = model.compute_logits(out.hidden_states)
        start = 0
        for prompt in prompts:
            expected = hf_model(input_ids=torch.tensor([prompt])).logits[0]
            torch.testing.assert_close(logits[start:start + len(prompt)], expected,
                                       atol=ATOL, rtol=0)
            start += len(prompt)
