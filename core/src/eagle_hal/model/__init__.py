"""The models eagle-hal runs: the Llama-family target and the EAGLE draft heads.

Both compute through the ``AttentionBackend`` contract and never name a device. Loading
(Hugging Face directories, GGUF files, EAGLE head directories, tokenizers) lives in
``eagle_hal.model.loading``.
"""

from __future__ import annotations

from eagle_hal.model.config import ModelConfig, RopeScaling, RopeScalingKind
from eagle_hal.model.eagle import (
    Eagle1DraftModel,
    Eagle3DraftModel,
    EagleDraftModel,
    default_eagle3_aux_layers,
)
from eagle_hal.model.errors import (
    MissingTensorsError,
    ModelFileNotFound,
    ModelLoadError,
    TensorShapeMismatch,
    UnexpectedTensorsError,
    UnsupportedModelError,
)
from eagle_hal.model.llama import LlamaForCausalLM, ModelOutput

__all__ = [
    "Eagle1DraftModel",
    "Eagle3DraftModel",
    "EagleDraftModel",
    "LlamaForCausalLM",
    "MissingTensorsError",
    "ModelConfig",
    "ModelFileNotFound",
    "ModelLoadError",
    "ModelOutput",
    "RopeScaling",
    "RopeScalingKind",
    "TensorShapeMismatch",
    "UnexpectedTensorsError",
    "UnsupportedModelError",
    "default_eagle3_aux_layers",
]
