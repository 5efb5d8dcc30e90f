"""What differs between training an EAGLE-1 and an EAGLE-3 head: one strategy object each.

The training loop (``train.trainer``), validation (``train.evaluate``) and checkpoints
(``train.checkpoint``) are the same for both heads; a ``HeadVariant`` supplies the rest:
which target streams the ``FeatureStore`` keeps, the fresh head, the feature noise, the
loss, the inference copy and the published layout it is saved in. ``TrainConfig.variant``
names one (``head_variant``); a head finds its own (``variant_of``).
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar, cast

import torch

from eagle_hal.model.eagle import Eagle1DraftModel, Eagle3DraftModel, EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.model.loading.eagle_ckpt import save_eagle1, save_eagle3
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.eagle3 import (
    copy_eagle3,
    eagle3_feature_layers,
    init_eagle3,
    unrolled_eagle3_loss,
)
from eagle_hal.train.features import FeatureStore
from eagle_hal.train.initial_weights import draw_initial_weights
from eagle_hal.train.loss import UnrolledLossParts, unrolled_eagle1_loss

__all__ = [
    "HEAD_VARIANTS",
    "Eagle1Variant",
    "Eagle3Variant",
    "HeadVariant",
    "copy_eagle1",
    "head_variant",
    "init_eagle1",
    "variant_of",
]


class HeadVariant(abc.ABC):
    """How one kind of head is trained. Stateless; the instances are ``HEAD_VARIANTS``."""

    name: ClassVar[str]  # as TrainConfig.variant and ``--variant`` spell it
    head_type: ClassVar[type[EagleDraftModel]]
    regresses_features: ClassVar[bool]  # whether a feature regression term makes sense
    default_regression_weight: ClassVar[float]
    default_cross_entropy_weight: ClassVar[float]
    stacks_layers: ClassVar[bool] = False  # whether its head may be deeper or narrower

    def check_shape(self, layers: int, intermediate_size: int | None) -> None:
        """Refuse (ValueError) a head shape this variant cannot build: ``layers`` decoder
        layers with MLPs ``intermediate_size`` wide (None: the target's width)."""
        if layers < 1 or (intermediate_size is not None and intermediate_size < 1):
            raise ValueError("the head's layer count and MLP width must be >= 1")
        if not self.stacks_layers and (layers != 1 or intermediate_size is not None):
            raise ValueError(
                f"an {self.name} head has one layer of the target's width: stacked layers "
                "and a narrower MLP are for eagle1"
            )

    @abc.abstractmethod
    def feature_layers(self, target: LlamaForCausalLM) -> tuple[int, ...]:
        """The target layers whose input residual streams the ``FeatureStore`` keeps before
        each token's final normed state (``()``: the final state alone)."""

    @abc.abstractmethod
    def init_head(
        self, target: LlamaForCausalLM, seed: int, *, layers: int = 1,
        intermediate_size: int | None = None,
    ) -> EagleDraftModel:
        """A fresh float32 head for ``target``, its weights drawn from ``seed``; ``layers``
        and ``intermediate_size`` (None: the target's) shape an EAGLE-1 head."""

    @abc.abstractmethod
    def noise_half_width(
        self, feature_noise: float, features: FeatureStore, train_ids: torch.Tensor
    ) -> float:
        """What ``loss`` takes as ``noise_half_width`` for ``TrainConfig.feature_noise``."""

    @abc.abstractmethod
    def loss(
        self,
        head: EagleDraftModel,
        target: LlamaForCausalLM,
        rows: PaddedRows,
        features: torch.Tensor,
        *,
        step_weights: Sequence[float],
        noise_half_width: float,
        regression_weight: float,
        cross_entropy_weight: float,
        generator: torch.Generator | None = None,
    ) -> UnrolledLossParts:
        """The unrolled loss of ``head`` on ``rows`` with ``FeatureStore.rows`` features
        ``[B, L, W]`` (see ``train.loss.unrolled_loss``)."""

    @abc.abstractmethod
    def copy_head(
        self, head: EagleDraftModel, target: LlamaForCausalLM, dtype: torch.dtype
    ) -> EagleDraftModel:
        """A copy of ``head``'s weights in ``dtype``, for inference or saving."""

    @abc.abstractmethod
    def save(self, head: EagleDraftModel, directory: str | Path) -> None:
        """Write ``head`` as a published-layout head directory."""


def init_eagle1(
    target: LlamaForCausalLM, seed: int, *, layers: int = 1, intermediate_size: int | None = None
) -> Eagle1DraftModel:
    """A fresh float32 EAGLE-1 head of ``layers`` decoder layers with the target's layer
    geometry (the MLP ``intermediate_size`` wide if given): linear weights N(0, 0.02),
    biases 0, norm weights 1."""
    config = dataclasses.replace(
        target.config,
        num_layers=layers,
        intermediate_size=intermediate_size or target.config.intermediate_size,
    )
    head = Eagle1DraftModel(config, target, fc_bias=True, dtype=torch.float32)
    draw_initial_weights(head, seed)
    return head


def copy_eagle1(
    head: Eagle1DraftModel, target: LlamaForCausalLM, dtype: torch.dtype
) -> Eagle1DraftModel:
    """A copy of ``head``'s weights in ``dtype`` (for inference or saving), sharing the
    target's embedding and ``lm_head``."""
    copy = Eagle1DraftModel(head.config, target, fc_bias=head.fc.bias is not None, dtype=dtype)
    copy.load_state_dict(head.state_dict())
    return copy.eval()


class Eagle1Variant(HeadVariant):
    """EAGLE-1: the target's final normed state is both the input feature and the
    regression target; noise is absolute, ``feature_noise`` times the stored features' RMS
    over the training sequences."""

    name = "eagle1"
    head_type = Eagle1DraftModel
    regresses_features = True
    stacks_layers = True
    default_regression_weight = 1.0
    default_cross_entropy_weight = 0.1

    def feature_layers(self, target: LlamaForCausalLM) -> tuple[int, ...]:
        return ()

    def init_head(
        self, target: LlamaForCausalLM, seed: int, *, layers: int = 1,
        intermediate_size: int | None = None,
    ) -> EagleDraftModel:
        return init_eagle1(target, seed, layers=layers, intermediate_size=intermediate_size)

    def noise_half_width(
        self, feature_noise: float, features: FeatureStore, train_ids: torch.Tensor
    ) -> float:
        return feature_noise * features.rms(train_ids)

    def loss(
        self,
        head: EagleDraftModel,
        target: LlamaForCausalLM,
        rows: PaddedRows,
        features: torch.Tensor,
        *,
        step_weights: Sequence[float],
        noise_half_width: float,
        regression_weight: float,
        cross_entropy_weight: float,
        generator: torch.Generator | None = None,
    ) -> UnrolledLossParts:
        return unrolled_eagle1_loss(
            cast(Eagle1DraftModel, head),
            target,
            rows,
            features,
            step_weights=step_weights,
            noise_half_width=noise_half_width,
            regression_weight=regression_weight,
            cross_entropy_weight=cross_entropy_weight,
            generator=generator,
        )

    def copy_head(
        self, head: EagleDraftModel, target: LlamaForCausalLM, dtype: torch.dtype
    ) -> EagleDraftModel:
        return copy_eagle1(cast(Eagle1DraftModel, head), target, dtype)

    def save(self, head: EagleDraftModel, directory: str | Path) -> None:
        save_eagle1(cast(Eagle1DraftModel, head), directory)


class Eagle3Variant(HeadVariant):
    """EAGLE-3 (``train.eagle3``): ``fc`` over 3 target layers' streams, its own norm and
    ``lm_head``, the cross-entropy alone. Its step-1 input, ``fc``'s output, moves as ``fc``
    learns, so the noise is relative: ``feature_noise`` times that input's RMS in each
    batch (``noise_half_width`` returns ``feature_noise`` itself)."""

    name = "eagle3"
    head_type = Eagle3DraftModel
    regresses_features = False
    default_regression_weight = 0.0
    default_cross_entropy_weight = 1.0

    def feature_layers(self, target: LlamaForCausalLM) -> tuple[int, ...]:
        return eagle3_feature_layers(target)

    def init_head(
        self, target: LlamaForCausalLM, seed: int, *, layers: int = 1,
        intermediate_size: int | None = None,
    ) -> EagleDraftModel:
        self.check_shape(layers, intermediate_size)
        return init_eagle3(target, seed)

    def noise_half_width(
        self, feature_noise: float, features: FeatureStore, train_ids: torch.Tensor
    ) -> float:
        return feature_noise

    def loss(
        self,
        head: EagleDraftModel,
        target: LlamaForCausalLM,
        rows: PaddedRows,
        features: torch.Tensor,
        *,
        step_weights: Sequence[float],
        noise_half_width: float,
        regression_weight: float,
        cross_entropy_weight: float,
        generator: torch.Generator | None = None,
    ) -> UnrolledLossParts:
        if regression_weight:
            raise ValueError(
                "an EAGLE-3 head trains on the distribution alone: set regression_weight 0"
            )
        return unrolled_eagle3_loss(
            cast(Eagle3DraftModel, head),
            target,
            rows,
            features,
            step_weights=step_weights,
            relative_noise=noise_half_width,
            cross_entropy_weight=cross_entropy_weight,
            generator=generator,
        )

    def copy_head(
        self, head: EagleDraftModel, target: LlamaForCausalLM, dtype: torch.dtype
    ) -> EagleDraftModel:
        return copy_eagle3(cast(Eagle3DraftModel, head), target, dtype)

    def save(self, head: EagleDraftModel, directory: str | Path) -> None:
        save_eagle3(cast(Eagle3DraftModel, head), directory)


HEAD_VARIANTS: dict[str, HeadVariant] = {
    variant.name: variant for variant in (Eagle1Variant(), Eagle3Variant())
}


def head_variant(name: str) -> HeadVariant:
    """The variant called ``name``. Raises ``ValueError`` naming the known ones."""
    try:
        return HEAD_VARIANTS[name]
    except KeyError:
        known = ", ".join(sorted(HEAD_VARIANTS))
        raise ValueError(f"unknown head variant {name!r}: expected one of {known}") from None


def variant_of(head: EagleDraftModel) -> HeadVariant:
    """The variant that trains heads of ``head``'s type. Raises ``TypeError`` for others."""
    for variant in HEAD_VARIANTS.values():
        if isinstance(head, variant.head_type):
            return variant
    raise TypeError(f"no training variant for a {type(head).__name__}")
