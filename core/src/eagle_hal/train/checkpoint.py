"""Saving a trained head: the published layout of its variant, plus the recipe that made it.

``save_eagle1`` writes ``config.json`` and ``model.safetensors`` (``fc.*``, ``layers.0.*``)
as SafeAILab's EAGLE-1 checkpoints are laid out; ``save_eagle3`` an EAGLE-3 head as
SpecForge's are (``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``,
``t2d``); so other engines load the head too. The recipe goes under one extra key of
``config.json``, ``eagle_hal_training``: loaders that do not know it ignore it.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from eagle_hal.model.eagle import EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset, command_with_file_names, file_name
from eagle_hal.train.evaluate import ValidationPoint
from eagle_hal.train.recipe import TrainConfig
from eagle_hal.train.variants import variant_of

__all__ = ["RECIPE_KEY", "TrainingRecipe", "read_recipe", "save_trained_head"]

RECIPE_KEY = "eagle_hal_training"


@dataclasses.dataclass(frozen=True, slots=True)
class TrainingRecipe:
    """Everything needed to reproduce a head: target, data, settings, command, outcome.

    Files are named by their names alone (the target by its file name and SHA-256, the
    commands' path options by file names), never by a machine's paths."""

    target: str
    target_sha256: str
    data_sequences: int
    data_tokens: int
    data_answer_tokens: int
    validation_sequences: int
    data_seed: int
    data_generation: dict[str, Any]  # DatasetInfo as saved with the data set
    train: dict[str, Any]  # TrainConfig
    steps: int
    feature_noise_half_width: float
    train_loss_first: float
    train_loss_last: float
    validations: list[dict[str, float | int]]
    command: str
    wall_seconds: float
    eagle_hal_version: str

    @classmethod
    def of(
        cls,
        dataset: DistillDataset,
        config: TrainConfig,
        *,
        steps: int,
        noise_half_width: float,
        losses: tuple[float, float],
        validations: list[ValidationPoint],
        command: str,
        wall_seconds: float,
    ) -> TrainingRecipe:
        from eagle_hal import __version__

        # a data set may name its target and files by paths (one written by an older
        # version, or through the Python API): the recipe keeps their names only
        generation = dataclasses.asdict(dataset.info)
        generation["target"] = file_name(dataset.info.target)
        generation["command"] = command_with_file_names(dataset.info.command)
        return cls(
            target=generation["target"],
            target_sha256=dataset.info.target_sha256,
            data_sequences=dataset.num_sequences,
            data_tokens=dataset.num_tokens,
            data_answer_tokens=dataset.num_answer_tokens,
            validation_sequences=len(dataset.validation_indices()),
            data_seed=dataset.info.seed,
            data_generation=generation,
            train=dataclasses.asdict(config),
            steps=steps,
            feature_noise_half_width=round(noise_half_width, 6),
            train_loss_first=round(losses[0], 5),
            train_loss_last=round(losses[1], 5),
            validations=[
                {
                    "step": p.step,
                    "loss": round(p.loss, 5),
                    "top1_accuracy": round(p.top1_accuracy, 4),
                    "accept_length": round(p.accept_length, 3),
                }
                for p in validations
            ],
            command=command_with_file_names(command),
            wall_seconds=round(wall_seconds, 1),
            eagle_hal_version=__version__,
        )


def save_trained_head(
    head: EagleDraftModel,
    target: LlamaForCausalLM,
    directory: str | Path,
    recipe: TrainingRecipe,
    dtype: torch.dtype = torch.bfloat16,
) -> Path:
    """Write ``head`` in ``dtype`` as a head directory of its variant's published layout
    with ``recipe`` in its ``config.json``; returns the directory."""
    directory = Path(directory)
    variant = variant_of(head)
    variant.save(variant.copy_head(head, target, dtype), directory)
    config_path = directory / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config[RECIPE_KEY] = dataclasses.asdict(recipe)
    config_path.write_text(json.dumps(config, indent=2) + "\n", encoding="utf-8")
    return directory


def read_recipe(directory: str | Path) -> dict[str, Any] | None:
    """The training recipe recorded in a head directory's ``config.json``, if any."""
    raw = json.loads((Path(directory) / "config.json").read_text(encoding="utf-8"))
    recipe = raw.get(RECIPE_KEY)
    return recipe if isinstance(recipe, dict) else None
