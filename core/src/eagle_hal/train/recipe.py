"""The training recipe: optimiser, schedule, loss weights, noise, validation cadence."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

from eagle_hal.train.variants import head_variant

__all__ = ["Schedule", "TrainConfig"]


@dataclasses.dataclass(frozen=True, slots=True)
class TrainConfig:
    """Draft head training settings.

    ``variant`` is the head trained: ``"eagle1"`` or ``"eagle3"`` (``train.variants``).
    Loss: ``regression_weight * smooth_l1(predicted next feature, target's next feature) +
    cross_entropy_weight * soft_cross_entropy(lm_head(predicted), target's distribution)``;
    the defaults are EAGLE-1's (1.0 and 0.1); ``for_variant`` starts from the variant's
    (EAGLE-3: 0 and 1.0, and ``regression_weight`` must stay 0: its output is not in the
    target's feature space).
    Input features get uniform noise of half-width ``feature_noise`` times the training
    features' RMS (EAGLE-3: times the RMS of its ``fc`` output, batch by batch).
    ``unroll_steps > 1`` trains the later steps of a draft chain too
    (``train.unrolled``): step ``s`` reads the head's own step ``s - 1`` output, as inference
    does at depth ``s``, and its loss is added with weight ``unroll_decay ** (s - 1)``
    (``step_weights``); 1 is the one-step EAGLE-1 loss. AdamW; the learning rate warms up
    linearly over ``warmup_fraction`` of the steps, then follows a cosine down to
    ``min_lr_ratio * lr``.
    """

    steps: int = 3000
    batch_size: int = 32  # sequences per step
    lr: float = 5e-4
    warmup_fraction: float = 0.05
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 0.5
    variant: str = "eagle1"
    draft_layers: int = 1  # EAGLE-1 only: decoder layers in the head
    draft_intermediate_size: int | None = None  # EAGLE-1 only: its MLP width (None: the target's)
    regression_weight: float = 1.0  # EAGLE-1's; for_variant starts from each variant's
    cross_entropy_weight: float = 0.1
    feature_noise: float = 0.1
    unroll_steps: int = 1  # draft steps trained per position (1: EAGLE-1's one-step loss)
    unroll_decay: float = 1.0  # step s's loss weight is unroll_decay ** (s - 1)
    seed: int = 0
    validate_every: int = 500  # steps; validation also runs after the last step
    validation_prompts: int = 16  # held-out prompts decoded by the engine
    validation_new_tokens: int = 128
    validation_draft_steps: int = 5  # chain S
    feature_batch_tokens: int = 32768  # tokens per target forward when computing features
    time_budget_s: float | None = None  # shorten the schedule / stop to fit

    def __post_init__(self) -> None:
        variant = head_variant(self.variant)  # raises ValueError for an unknown name
        if self.regression_weight > 0 and not variant.regresses_features:
            raise ValueError(
                f"a {variant.name} head trains on the distribution alone (its output is not "
                "in the target's feature space): set regression_weight to 0, or build the "
                f"settings with TrainConfig.for_variant({variant.name!r}, ...)"
            )
        variant.check_shape(self.draft_layers, self.draft_intermediate_size)
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be >= 1")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")
        if not 0.0 <= self.warmup_fraction < 1.0 or not 0.0 <= self.min_lr_ratio <= 1.0:
            raise ValueError("warmup_fraction must lie in [0, 1) and min_lr_ratio in [0, 1]")
        if self.regression_weight < 0 or self.cross_entropy_weight < 0:
            raise ValueError("loss weights must be >= 0")
        if self.regression_weight == 0 and self.cross_entropy_weight == 0:
            raise ValueError("at least one loss weight must be > 0")
        if self.feature_noise < 0:
            raise ValueError("feature_noise must be >= 0")
        if self.unroll_steps < 1:
            raise ValueError(f"unroll_steps must be >= 1, got {self.unroll_steps}")
        if self.unroll_decay <= 0:
            raise ValueError(f"unroll_decay must be > 0, got {self.unroll_decay}")
        if self.validate_every < 1 or self.validation_draft_steps < 1:
            raise ValueError("validate_every and validation_draft_steps must be >= 1")

    @classmethod
    def for_variant(cls, variant: str, **settings: Any) -> TrainConfig:
        """Settings for a ``variant`` head: its default loss weights (EAGLE-1 1.0 and 0.1,
        EAGLE-3 0 and 1.0) unless ``settings`` give them, the class defaults otherwise.
        Raises ``ValueError`` as the constructor does."""
        defaults = head_variant(variant)
        settings.setdefault("regression_weight", defaults.default_regression_weight)
        settings.setdefault("cross_entropy_weight", defaults.default_cross_entropy_weight)
        return cls(variant=variant, **settings)

    @property
    def step_weights(self) -> tuple[float, ...]:
        """The loss weight of each unroll step, ``(1, d, d ** 2, ...)`` for decay ``d``."""
        return tuple(self.unroll_decay**step for step in range(self.unroll_steps))

    def learning_rate(self, step: int, total_steps: int | None = None) -> float:
        """The learning rate of 0-based ``step`` in a run of ``total_steps`` (default
        ``steps``) that keeps its length; ``Schedule`` follows a run that refits it."""
        return Schedule(self, total_steps).learning_rate(step)


class Schedule:
    """``config``'s learning-rate schedule over a run whose length a time budget may refit
    (``refit``) while it runs, without jumps: refitted during the warm-up, the warm-up
    follows the new length; refitted after it, the warm-up stays as it was and the cosine
    goes on from where it is down to its floor at the new last step. So the rate never
    rises again once the warm-up is over."""

    __slots__ = ("_anchor", "_config", "_warmup", "total")

    def __init__(self, config: TrainConfig, total_steps: int | None = None) -> None:
        self._config = config
        self.total = total_steps or config.steps
        self._warmup: int | None = None  # fixed once the warm-up is over
        self._anchor: tuple[int, float] | None = None  # (step, cosine progress) of a refit

    @property
    def warmup(self) -> int:
        if self._warmup is not None:
            return self._warmup
        return max(1, round(self._config.warmup_fraction * self.total))

    def progress(self, step: int) -> float:
        """How far along the cosine ``step`` is, in [0, 1]."""
        if self._anchor is not None:
            start, done = self._anchor
            return min(1.0, done + (1.0 - done) * (step - start) / max(1, self.total - start))
        return min(1.0, max(0.0, (step - self.warmup) / max(1, self.total - self.warmup)))

    def refit(self, step: int, total_steps: int) -> None:
        """From ``step`` on, the run ends after ``total_steps`` steps."""
        if step >= self.warmup:
            self._anchor = (step, self.progress(step))
            self._warmup = self.warmup
        self.total = total_steps

    def learning_rate(self, step: int) -> float:
        config = self._config
        if step < self.warmup:
            return config.lr * (step + 1) / self.warmup
        cosine = 0.5 * (1.0 + math.cos(math.pi * self.progress(step)))
        return config.lr * (config.min_lr_ratio + (1.0 - config.min_lr_ratio) * cosine)
