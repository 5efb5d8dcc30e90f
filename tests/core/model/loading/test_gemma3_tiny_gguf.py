"""A tiny Gemma 3 written as llama.cpp writes Gemma 3 GGUF files (``gemma3`` metadata, norms
stored as ``1 + w``, ``ffn_norm`` the pre-MLP norm, a SentencePiece vocabulary with byte
tokens and no merges), read back by eagle-hal.

Oracles: the transformers ``Gemma3ForCausalLM`` whose weights were written (float32 logits,
atol 1e-4), and transformers' own GGUF tokenizer conversion of the same file (ids and
decoded text).
"""

from __future__ import annotations

import random

import pytest
import torch
from gguf_layout import write_tensors

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

ATOL = 1e-4
LAYERS, HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, WINDOW = 4, 64, 4, 2, 16, 96, 24
WORDS = ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁a", "at", "he", "th", "▁t", "▁c", "▁s",
         "▁m", "▁o", "on", "▁▁", "▁▁▁", "\n", "\n\n", "é", "▁h", "▁hé"]
TEXTS = ["the cat sat on the mat", "  a hat\n\nthe mats", "héllo 日 wörld", "x<end_of_turn>y",
         "<start_of_turn>user\nthe cat<end_of_turn>", "   three  two "]


def vocabulary() -> tuple[list[str], list[int]]:
    """Control tokens, byte tokens, single characters, then longer pieces (file order is
    Gemma's merge order); one token of two spaces is stored as spaces, as llama.cpp does."""
    control = ["<pad>", "<eos>", "<bos>", "<unk>", "<start_of_turn>", "<end_of_turn>"]
    chars = sorted({c for w in WORDS for c in w} | set("abcdefghijklmnopqrstuvwxyz"))
    tokens = control + [f"<0x{b:02X}>" for b in range(256)] + chars
    tokens += [w for w in WORDS if w not in tokens]
    tokens.append("  ")
    types = [3] * len(control) + [6] * 256 + [1] * (len(tokens) - len(control) - 256)
    types[control.index("<unk>")] = 2
    return tokens, types


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tokens, types = vocabulary()
    torch.manual_seed(0)
    config = transformers.Gemma3TextConfig(
        vocab_size=len(tokens), hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM, query_pre_attn_scalar=HEAD_DIM, sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * 2, max_position_embeddings=512,
        rms_norm_eps=1e-6, pad_token_id=0, eos_token_id=1, bos_token_id=2,
        rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                         "full_attention": {"rope_type": "default", "rope_theta": 1e6}})
    model = transformers.Gemma3ForCausalLM(config).float().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(noise * (0.3 if "norm" in name else 0.2 if "embed" in name else 0.05))
    directory = tmp_path_factory.mktemp("gemma-gguf")
    path = directory / "tiny-gemma3.gguf"
    writer = gguf.GGUFWriter(str(path), arch="gemma3")
    writer.add_block_count(LAYERS)
    writer.add_context_length(512)
    writer.add_embedding_length(HIDDEN)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_key_length(HEAD_DIM)
    writer.add_value_length(HEAD_DIM)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_rope_freq_base(1e6)
    writer.add_sliding_window(WINDOW)
    writer.add_uint32("gemma3.attention.sliding_window_pattern", 2)
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(2)
    writer.add_eos_token_id(1)
    writer.add_unk_token_id(3)
    writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
             "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
             "self_attn.o_proj": "attn_output", "self_attn.q_norm": "attn_q_norm",
             "self_attn.k_norm": "attn_k_norm", "post_attention_layernorm": "post_attention_norm",
             "pre_feedforward_layernorm": "ffn_norm", "post_feedforward_layernorm": "post_ffw_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    def tensors():
        for name, tensor in model.state_dict().items():
            if name == "lm_head.weight":
                continue  # tied: llama.cpp writes no output.weight
            values = tensor.detach().float().numpy()
            if name.endswith("norm.weight"):
                values = values + 1.0  # llama.cpp's converter stores Gemma's norms as 1 + w
            yield name, values

    write_tensors(writer, tensors(), names)
    return model, path


def test_logits_equal_the_written_model(written, runtime_for):
    from eagle_hal.model.loading.gguf import load_gguf_model

    hf_model, path = written
    model = load_gguf_model(path, progress=False)
    assert model.config.architecture == "gemma3" and model.config.sliding_layers == (0, 2)
    assert model.config.unwindowed_context_len == WINDOW
    runtime = runtime_for(model.config)
    rng = random.Random(3)
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(n)] for n in (9, WINDOW)]
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


def test_tokenizer_equals_transformers_conversion(written):
    from eagle_hal.model.loading import Tokenizer
    from eagle_hal.model.loading.gguf import gguf_reader

    _, path = written
    ours = Tokenizer.from_gguf(gguf_reader(path))
    reference = transformers.AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    for text in TEXTS:
        ids = ours.encode(text)
        assert ids == reference(text).input_ids, text
        assert ours.decode(ids) == reference.decode(ids), text
        assert ours.decode(ids, skip_special_tokens=True) == reference.decode(
            ids, skip_special_tokens=True), text
    assert ours.eos_token_ids == (1,)
    assert ours.encode("the cat")[0] == 2  # BOS first
