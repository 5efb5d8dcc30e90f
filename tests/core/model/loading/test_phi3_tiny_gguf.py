"""A tiny Phi-3 written as llama.cpp writes Phi-3 GGUF files (``phi3`` metadata, the fused
``attn_qkv`` and ``ffn_up`` (gate, then up) tensors, a SentencePiece vocabulary with scores,
byte tokens and no merges), read back by eagle-hal.

Oracles: the transformers ``Phi3ForCausalLM`` whose weights were written (float32 logits,
atol 1e-4), and transformers' own GGUF tokenizer conversion of the same file.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch
from gguf_layout import write_tensors

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")

ATOL = 1e-4
PIECES = ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁a", "at", "he", "th", "▁t", "▁c", "▁s",
          "▁m", "▁o", "on", "▁▁", "▁▁▁", "é", "▁h", "▁hé", "<|user|>", "<|end|>"]
TEXTS = ["the cat sat on the mat", "  a hat\n\nthe mats", "héllo 日 wörld", " leading",
         "<|user|>the cat<|end|>", "   three  two "]
NAMES = {"input_layernorm": "attn_norm", "self_attn.qkv_proj": "attn_qkv",
         "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
         "mlp.gate_up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def vocabulary():
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    tokens += sorted({c for p in PIECES[:-2] for c in p} | set("abcdefghijklmnopqrstuvwxyz"))
    tokens += [p for p in PIECES if p not in tokens]
    types = [2, 3, 3] + [6] * 256 + [1] * (len(tokens) - 259)
    for special in ("<|user|>", "<|end|>"):
        types[tokens.index(special)] = 3
    # SentencePiece scores: longer pieces later get lower (more negative) scores
    scores = [0.0] * 259 + [-float(i) for i in range(len(tokens) - 259)]
    return tokens, types, scores


@pytest.fixture(scope="module")
def written(tmp_path_factory):
    tokens, types, scores = vocabulary()
    torch.manual_seed(0)
    config = transformers.Phi3Config(
        vocab_size=len(tokens), hidden_size=64, intermediate_size=96, num_hidden_layers=3,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        original_max_position_embeddings=256, rms_norm_eps=1e-5, pad_token_id=0,
        bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)
    model = transformers.Phi3ForCausalLM(config).float().eval()
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(1 + 0.2 * noise if name.endswith("norm.weight") else noise * 0.05)
    path = tmp_path_factory.mktemp("phi3-gguf") / "tiny-phi3.gguf"
    writer = gguf.GGUFWriter(str(path), arch="phi3")
    writer.add_block_count(3)
    writer.add_context_length(256)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(96)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_dimension_count(16)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(config.rope_parameters["rope_theta"])
    writer.add_tokenizer_model("llama")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    write_tensors(writer, ((name, t.numpy()) for name, t in model.state_dict().items()), NAMES)
    return model, path


def test_logits_equal_the_written_model(written, runtime_for):
    from eagle_hal.model.loading.gguf import load_gguf_model

    hf_model, path = written
    model = load_gguf_model(path, progress=False)
    assert model.config.architecture == "phi3"
    runtime = runtime_for(model.config, page_size=16)
    rng = random.Random(2)
    prompts = [[rng.randrange(model.config.vocab_size) for _ in range(n)] for n in (5, 12)]
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


def test_longrope_files_are_refused(tmp_path):
    from eagle_hal.model.errors import UnsupportedModelError
    from eagle_hal.model.loading.gguf import load_gguf_model

    path = tmp_path / "longrope.gguf"
    writer = gguf.GGUFWriter(str(path), arch="phi3")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_vocab_size(4)
    writer.add_tensor("rope_factors_long.weight", np.ones(2, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="longrope"):
        load_gguf_model(path, progress=False)
