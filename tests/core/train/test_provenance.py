"""A head's and a data set's provenance name files by their names and SHA-256, never by a
machine's paths.

Oracle: the expected strings, written by hand.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from eagle_hal.train.checkpoint import TrainingRecipe
from eagle_hal.train.dataset import (
    DatasetInfo,
    DistillDataset,
    command_with_file_names,
    file_name,
)
from eagle_hal.train.evaluate import ValidationPoint
from eagle_hal.train.recipe import TrainConfig

GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.mark.parametrize(
    ("path", "name"),
    [(f"/root/stage/{GGUF}", GGUF), (GGUF, GGUF), ("../models/llama/", "llama"), ("", "")],
)
def test_file_name(path, name):
    assert file_name(path) == name


def test_command_keeps_only_file_names_of_path_options():
    """Every path option's value loses its directories, in both spellings; other values
    (a named opener set, numbers, devices) are left alone; quoting survives."""
    command = (
        f"eagle-hal train-draft --data /root/train/data.safetensors --device cuda:0 "
        f"--model /root/stage/{GGUF} --out /root/train/headI --prompt-openers broad "
        f"--seed 5 --vocab-data=/tmp/a/more.safetensors --prompt-openers '/my dir/o.txt'"
    )
    assert command_with_file_names(command) == (
        f"eagle-hal train-draft --data data.safetensors --device cuda:0 --model {GGUF} "
        f"--out headI --prompt-openers broad --seed 5 --vocab-data=more.safetensors "
        f"--prompt-openers o.txt"
    )
    assert command_with_file_names(command_with_file_names(command)) == (
        command_with_file_names(command)
    )
    assert command_with_file_names("") == ""


def test_recipe_of_a_data_set_that_names_paths():
    """A data set whose info names its target and files by absolute paths (as older ones
    do): the head's recipe records the file names, the SHA-256 unchanged."""
    info = DatasetInfo(
        target=f"/root/stage/{GGUF}",
        target_sha256="ab" * 32,
        seed=5,
        num_prompts=2,
        max_prompt_tokens=8,
        max_new_tokens=8,
        prompt_temperatures=(1.0,),
        answer_temperatures=(0.0,),
        top_p=0.95,
        generation_seconds=1.0,
        command=f"eagle-hal train-draft --model /root/stage/{GGUF} --out /root/train/headI "
        "--stage data",
    )
    dataset = DistillDataset.from_sequences([[1, 2, 3], [4, 5, 6]], [2, 2], [False, True],
                                            [0.0, 0.0], info)
    recipe = TrainingRecipe.of(
        dataset,
        TrainConfig(),
        steps=1,
        noise_half_width=0.1,
        losses=(2.0, 1.0),
        validations=[ValidationPoint(1, 1.0, 0.5, 1.5)],
        command="eagle-hal train-draft --data /root/train/data.safetensors --stage train",
        wall_seconds=1.0,
    )
    recorded = dataclasses.asdict(recipe)
    assert "/root" not in json.dumps(recorded)
    assert recorded["target"] == GGUF == recorded["data_generation"]["target"]
    assert recorded["target_sha256"] == "ab" * 32
    assert recorded["command"] == "eagle-hal train-draft --data data.safetensors --stage train"
    assert recorded["data_generation"]["command"] == (
        f"eagle-hal train-draft --model {GGUF} --out headI --stage data"
    )
