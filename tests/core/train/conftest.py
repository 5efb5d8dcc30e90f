"""Fixtures for the trainer tests: the CPU backend and a tiny random chat model on disk
(a Hugging Face directory: config.json, safetensors weights, a word-level tokenizer with a
chat template), so the trainer runs end to end as a user would run it."""

from __future__ import annotations

import json

import pytest
import torch
from eagle_hal.testing.models import tiny_target
from safetensors.torch import save_file

VOCAB = 97
SPECIAL = ["<pad>", "<user>", "<eos>", "<assistant>", "<system>"]  # ids 0..4
EOS = 2
TEMPLATE = (
    "{% for m in messages %}<{{ m['role'] }}> {{ m['content'] }} <eos> {% endfor %}"
    "{% if add_generation_prompt %}<assistant> {% endif %}"
)


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models on a shared CI machine: intra-op threads only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def cpu_backend():
    from eagle_hal import select_backend

    return select_backend("cpu")


def _tokenizer_json() -> str:
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {token: i for i, token in enumerate(SPECIAL)}
    vocab.update({f"w{i}": i for i in range(len(SPECIAL), VOCAB)})
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.add_special_tokens(SPECIAL)
    return tokenizer.to_str()


@pytest.fixture(scope="module")
def tiny_chat_model(tmp_path_factory):
    """A directory holding a tiny random Llama chat model (EOS id 2)."""
    return _write_chat_model(tmp_path_factory.mktemp("tiny-chat"), layers=2)


@pytest.fixture(scope="module")
def tiny_chat_model_deep(tmp_path_factory):
    """As ``tiny_chat_model`` with 8 layers: deep enough for EAGLE-3's default feature
    layers (2, 4, 5)."""
    return _write_chat_model(tmp_path_factory.mktemp("tiny-chat-deep"), layers=8)


def _write_chat_model(directory, layers):
    target = tiny_target(seed=31, vocab=VOCAB, layers=layers, eos=(EOS,))
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": 32,
        "intermediate_size": 64,
        "num_hidden_layers": layers,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 8,
        "max_position_embeddings": 1024,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "eos_token_id": EOS,
        "bos_token_id": 1,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
    }
    (directory / "config.json").write_text(json.dumps(config))
    state = {
        name: tensor.detach().clone().contiguous() for name, tensor in target.state_dict().items()
    }
    save_file(state, str(directory / "model.safetensors"))
    (directory / "tokenizer.json").write_text(_tokenizer_json())
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": TEMPLATE, "eos_token": "<eos>"})
    )
    return directory


@pytest.fixture(scope="module")
def tiny_chat(tiny_chat_model):
    """``(target, tokenizer)`` loaded from ``tiny_chat_model`` in float32 on the CPU."""
    from eagle_hal.model.loading import load_target

    return load_target(tiny_chat_model, dtype=torch.float32, device="cpu", progress=False)
