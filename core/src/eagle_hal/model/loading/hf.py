"""Hugging Face model directories: ``config.json`` plus single or sharded safetensors.

Only safetensors are read. A directory with PyTorch ``.bin`` weights only is refused:
unpickling runs arbitrary code. Convert such a checkpoint once with transformers:
``AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True)``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.errors import ModelFileNotFound, ModelLoadError
from eagle_hal.model.llama import LlamaForCausalLM

__all__ = ["iter_safetensors", "load_hf_model", "read_json", "safetensors_files"]

_SINGLE_FILE = "model.safetensors"
_SHARD_INDEX = "model.safetensors.index.json"


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON file; ``ModelFileNotFound`` if absent, ``ModelLoadError`` if malformed."""
    if not path.is_file():
        raise ModelFileNotFound(f"{path} does not exist")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as error:
        raise ModelLoadError(f"{path} is not valid JSON: {error}") from error


def safetensors_files(directory: Path) -> list[Path]:
    """The safetensors files of a model directory: the shards named by
    ``model.safetensors.index.json``, else ``model.safetensors``, else every ``*.safetensors``.
    Raises ``ModelFileNotFound`` (naming what was looked for) when there is none."""
    index = directory / _SHARD_INDEX
    if index.is_file():
        shards = sorted(set(read_json(index)["weight_map"].values()))
        paths = [directory / shard for shard in shards]
        for path in paths:
            if not path.is_file():
                raise ModelFileNotFound(f"shard {path.name} listed in {index} does not exist")
        return paths
    if (directory / _SINGLE_FILE).is_file():
        return [directory / _SINGLE_FILE]
    found = sorted(directory.glob("*.safetensors"))
    if found:
        return found
    if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
        raise ModelLoadError(
            f"{directory} holds only PyTorch pickle weights (.bin/.pt), which eagle-hal does "
            "not load (unpickling can run code). Convert them to safetensors first: "
            "transformers' save_pretrained(out_dir, safe_serialization=True)."
        )
    raise ModelFileNotFound(
        f"no weights in {directory}: expected {_SINGLE_FILE} or {_SHARD_INDEX} with its shards"
    )


def iter_safetensors(
    paths: list[Path], device: torch.device | str = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every tensor of ``paths``, one at a time."""
    from safetensors import safe_open

    for path in paths:
        with safe_open(str(path), framework="pt", device=str(device)) as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a Mapping
                yield name, handle.get_tensor(name)


def load_hf_model(
    directory: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> LlamaForCausalLM:
    """Build a ``LlamaForCausalLM`` from an HF directory's ``config.json`` and safetensors.

    ``progress`` shows a tqdm bar on stderr. Raises ``ModelFileNotFound`` (missing
    directory, config or weights),
    ``UnsupportedModelError`` (architecture), ``TensorShapeMismatch`` /
    ``MissingTensorsError`` / ``UnexpectedTensorsError`` (weights not matching the config).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelFileNotFound(f"model directory {directory} does not exist")
    config = ModelConfig.from_hf_config(read_json(directory / "config.json"))
    files = safetensors_files(directory)
    model = LlamaForCausalLM(config, dtype=dtype, device=device)
    tensors = _with_progress(iter_safetensors(files), directory, progress)
    model.load_weights(tensors, source=str(directory))
    return model.eval()


def _with_progress(
    tensors: Iterator[tuple[str, torch.Tensor]], directory: Path, progress: bool
) -> Iterator[tuple[str, torch.Tensor]]:
    from tqdm import tqdm

    yield from tqdm(
        tensors, desc=f"loading {directory.name}", unit=" tensors", leave=False,
        disable=not progress,
    )
