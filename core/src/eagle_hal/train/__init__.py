"""Training EAGLE draft heads from the target alone (``eagle-hal train-draft``).

``selfdistill`` has the target write prompts and answers (``DistillDataset``); ``features``
runs the target over them once; ``trainer`` fits an EAGLE-1 or EAGLE-3 head (the
``variants``; ``eagle3`` holds EAGLE-3's own pieces) with ``loss`` under a ``TrainConfig``;
``evaluate`` measures it with the real engine; ``checkpoint`` writes it in its variant's
published layout with its recipe. ``dense`` is the attention they share: the models' own
forward over whole padded sequences, no KV cache; ``unrolled`` runs the head over its own
predictions, as a draft chain does at depth 2 and beyond.
"""

from eagle_hal.train.checkpoint import TrainingRecipe, read_recipe, save_trained_head
from eagle_hal.train.dataset import DatasetInfo, DistillDataset
from eagle_hal.train.recipe import TrainConfig
from eagle_hal.train.selfdistill import DistillConfig, generate_dataset
from eagle_hal.train.trainer import TrainResult, train_eagle1, train_head
from eagle_hal.train.variants import HEAD_VARIANTS, HeadVariant, head_variant

__all__ = [
    "HEAD_VARIANTS",
    "DatasetInfo",
    "DistillConfig",
    "DistillDataset",
    "HeadVariant",
    "TrainConfig",
    "TrainResult",
    "TrainingRecipe",
    "generate_dataset",
    "head_variant",
    "read_recipe",
    "save_trained_head",
    "train_eagle1",
    "train_head",
]
