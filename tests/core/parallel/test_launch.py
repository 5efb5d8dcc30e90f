"""``eagle-hal generate --tp N``: N gloo processes on the CPU, rank 0 prints.

Oracle: greedy decoding written out as a loop over Hugging Face transformers' logits of
the same checkpoint (argmax, append, repeat).
"""

from __future__ import annotations

import argparse
import json

import pytest
import torch
from eagle_hal.commands.generate import launch_generate
from eagle_hal.parallel.launch import device_for_rank

VOCAB = 64


@pytest.mark.parametrize("device,rank,expected", [
    ("cpu", 1, "cpu"), ("cuda", 1, "cuda:1"), ("cuda:2", 1, "cuda:3"), ("npu", 0, "npu:0"),
    ("rocm:1", 2, "rocm:3"),
])
def test_device_for_rank(device, rank, expected):
    """Rank r takes device index base + r; every rank shares the host on the CPU."""
    assert device_for_rank(device, rank) == expected


def test_device_for_rank_refuses_auto():
    with pytest.raises(ValueError, match="explicit device"):
        device_for_rank("auto", 0)


def _tiny_hf_directory(directory):
    """A tiny random HF Llama (vocab 64, odd-free shapes for TP 2) with a word-level
    tokenizer whose token ``w{i}`` is id ``i``."""
    import transformers
    from tokenizers import Tokenizer, models, pre_tokenizers

    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        bos_token_id=None, eos_token_id=VOCAB - 1, tie_word_embeddings=True,
    )
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.3)
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer = Tokenizer(models.WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(directory / "tokenizer.json"))
    return model


def _greedy_oracle(model, prompt: list[int], steps: int) -> list[int]:
    ids = list(prompt)
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([ids])).logits[0, -1]
            ids.append(int(logits.argmax()))
    return ids[len(prompt):]


def test_generate_over_two_ranks_prints_greedy_tokens_once(tmp_path, capfd):
    """--tp 2 --json: one JSON report (rank 0 only) whose tokens are HF's greedy tokens."""
    from eagle_hal.commands import generate

    hf_model = _tiny_hf_directory(tmp_path / "tiny")
    parser = argparse.ArgumentParser()
    generate.add_arguments(parser)
    args = parser.parse_args([
        "--device", "cpu", "--tp", "2", "--model", str(tmp_path / "tiny"), "--draft", "none",
        "--no-chat", "--prompt", "w5 w9 w17 w33", "--max-new-tokens", "10", "--json",
        "--max-context", "128",
    ])
    assert launch_generate(args, args.tp) == 0
    out = capfd.readouterr().out
    report = json.loads(out)  # exactly one JSON document: the other rank printed nothing
    tokens = report["outputs"][0]["token_ids"]
    expected = _greedy_oracle(hf_model, [5, 9, 17, 33], 10)
    assert tokens == expected[: len(tokens)]
    assert len(tokens) == 10 or tokens[-1] == VOCAB - 1
    assert report["stats"]["tensor_parallel"] == 2
