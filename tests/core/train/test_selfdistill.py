"""Self-distillation pieces: the user-turn prefix and the generation settings."""

from __future__ import annotations

import pytest
from eagle_hal.train.selfdistill import DistillConfig, file_sha256, user_turn_prefix


def test_user_turn_prefix(tiny_chat):
    """The prefix is the template's text before the user's message: here "<user> "."""
    _, tokenizer = tiny_chat
    assert user_turn_prefix(tokenizer) == [1]
    with_message = tokenizer.apply_chat_template([{"role": "user", "content": "w7 w8"}])
    assert with_message[:1] == [1] and with_message[1:3] == tokenizer.encode("w7 w8")


def test_file_sha256_matches_hashlib(tmp_path):
    """A single file hashes as hashlib does."""
    import hashlib

    path = tmp_path / "model.gguf"
    path.write_bytes(b"weights" * 1000)
    assert file_sha256(path) == hashlib.sha256(b"weights" * 1000).hexdigest()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"num_prompts": 1},
        {"validation_fraction": 0.0},
        {"prompt_temperatures": ()},
        {"max_new_tokens": 0},
    ],
)
def test_rejects_bad_settings(kwargs):
    with pytest.raises(ValueError):
        DistillConfig(**kwargs)


def test_zero_time_budget_says_what_to_do(tiny_chat, cpu_backend):
    """With no time at all nothing is generated, and the error names the remedy."""
    from eagle_hal.train.selfdistill import generate_dataset

    target, tokenizer = tiny_chat
    config = DistillConfig(num_prompts=4, max_prompt_tokens=4, max_new_tokens=4, time_budget_s=0.0)
    with pytest.raises(RuntimeError, match="time budget"):
        generate_dataset(cpu_backend, target, tokenizer, config, progress=False)
