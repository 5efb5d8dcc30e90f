"""Self-distillation pieces: the user-turn prefix and the generation settings."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.commands.bench_prompts import DatasetError
from eagle_hal.errors import InvalidArgument
from eagle_hal.train.dataset import file_sha256
from eagle_hal.train.selfdistill import DistillConfig, user_turn_prefix

from .conftest import EOS


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


def test_openers_condition_the_user_prompts(tiny_chat, tiny_chat_model, cpu_backend):
    """Greedy prompts: each user message is its opener followed by what HF transformers'
    greedy decoding of the same model continues from the user-turn prefix plus that opener
    (so the target was conditioned on the opener, not just handed it afterwards)."""
    from eagle_hal.train.selfdistill import generate_dataset, user_turn_prefix
    from transformers import AutoModelForCausalLM

    target, tokenizer = tiny_chat
    openers = ("w5 w6", "w9", "w7 w8")
    config = DistillConfig(
        num_prompts=6, max_prompt_tokens=4, max_new_tokens=2, prompt_temperatures=(0.0,),
        prompt_openers=openers, validation_fraction=0.34,
    )
    assert [config.opener(i) for i in range(4)] == ["w5 w6", "w9", "w7 w8", "w5 w6"]
    data = generate_dataset(cpu_backend, target, tokenizer, config, progress=False)
    assert data.info.prompt_openers == openers
    assert data.num_sequences == 3  # greedy: the second round repeats the first, dropped

    hf = AutoModelForCausalLM.from_pretrained(tiny_chat_model, torch_dtype=torch.float32)
    prefix = user_turn_prefix(tokenizer)
    expected = set()
    for opener in openers:
        context = prefix + tokenizer.encode(opener, add_special_tokens=False)
        out = hf.generate(
            torch.tensor([context]), max_new_tokens=4, do_sample=False, eos_token_id=EOS,
            pad_token_id=0,
        )[0, len(context):].tolist()
        if EOS in out:
            out = out[: out.index(EOS)]
        expected.add(tuple(context[len(prefix):] + out))
    users = [tuple(data.sequence(i)[len(prefix):]) for i in range(data.num_sequences)]
    assert {next((e for e in expected if u[: len(e)] == e), u) for u in users} == expected


def test_train_draft_rejects_bad_temperatures():
    import argparse

    from eagle_hal.commands.train_draft import _floats

    assert _floats("0,0.5, 1") == (0.0, 0.5, 1.0)
    for bad in ("", "a,b", "-1", "nan", "0.5,inf"):
        with pytest.raises(argparse.ArgumentTypeError):
            _floats(bad)


def test_openers_file(tmp_path):
    """One opener a line (a byte-order mark is not part of the first); an empty file or a
    missing one is an error that says what to give instead."""
    from eagle_hal.commands.train_draft import _openers
    from eagle_hal.train.openers import BROAD_PROMPT_OPENERS, BUILTIN_PROMPT_OPENERS

    path = tmp_path / "openers.txt"
    path.write_text("Write a\n\nSolve\n", encoding="utf-8-sig")
    assert _openers(str(path)) == ("Write a", "", "Solve")
    path.write_text("Here is a review:\\n\\n\nSolve\n")  # a literal \n: a line break
    assert _openers(str(path)) == ("Here is a review:\n\n", "Solve")
    assert _openers("builtin") == BUILTIN_PROMPT_OPENERS and _openers("none") == ()
    assert _openers("broad") == BROAD_PROMPT_OPENERS
    assert set(BUILTIN_PROMPT_OPENERS) < set(BROAD_PROMPT_OPENERS)
    path.write_text("")
    with pytest.raises(DatasetError, match="none"):
        _openers(str(path))
    with pytest.raises(InvalidArgument, match="broad-passages.*or a readable file"):
        _openers(str(tmp_path / "missing.txt"))


def test_broad_passages_is_the_shipped_heads_openers():
    """'broad-passages' names, in order, the openers the shipped head's data was written
    from (its recipe records them): the broad set, then requests about a passage that end
    in a blank line, so that the target writes the passage before the request."""
    import json

    from eagle_hal.commands.train_draft import _openers
    from eagle_hal.model.loading import default_draft_path
    from eagle_hal.train.checkpoint import RECIPE_KEY
    from eagle_hal.train.openers import BROAD_PROMPT_OPENERS, PASSAGE_PROMPT_OPENERS

    config = json.loads((default_draft_path() / "config.json").read_text(encoding="utf-8"))
    recorded = tuple(config[RECIPE_KEY]["data_generation"]["prompt_openers"])
    assert _openers("broad-passages") == recorded
    assert _openers("broad-passages")[:len(BROAD_PROMPT_OPENERS)] == BROAD_PROMPT_OPENERS
    assert all(opener.endswith("\n\n") for opener in PASSAGE_PROMPT_OPENERS)


def test_recorded_command_reproduces_the_stage():
    """The recorded command spells out every setting of its stage, temperatures exactly;
    a --stage train command leaves the data stage's settings out."""
    import argparse
    import shlex

    from eagle_hal.commands.train_draft import _command_line, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    data = parser.parse_args(["--stage", "data", "--out", "h", "--prompt-temperatures",
                              "0.123456789,1"])
    words = shlex.split(_command_line(data))
    assert words[words.index("--prompt-temperatures") + 1] == "0.123456789,1.0"
    assert parser.parse_args(words[2:]).prompt_temperatures == (0.123456789, 1.0)
    train = shlex.split(_command_line(parser.parse_args(["--stage", "train", "--out", "h"])))
    assert "--steps" in train
    assert not {"--prompt-temperatures", "--num-prompts", "--prompt-openers"} & set(train)


def test_data_files_from_before_openers_still_load():
    """Provenance written before ``prompt_openers`` existed loads with no openers."""
    import json

    from eagle_hal.train.dataset import DatasetInfo

    info = DatasetInfo("t", "", 0, 6, 4, 8, (1.0,), (0.0,), 1.0, 0.0)
    raw = json.loads(info.to_json())
    del raw["prompt_openers"]
    assert DatasetInfo.from_json(json.dumps(raw)) == info
