"""The training loop of a draft head (EAGLE-1 or EAGLE-3, ``TrainConfig.variant``): only
the head learns; the target, and what the head shares with it (its embedding, and EAGLE-1's
``lm_head``), stays frozen.

Per step: ``batch_size`` training sequences (epochs of a seeded shuffle), their stored
target features (``FeatureStore``: the streams the variant reads), the variant's loss
unrolled ``unroll_steps`` draft steps (``train.variants``; one EAGLE-1 step is plain
EAGLE-1) under bf16/fp16 autocast when the target runs in a half type, AdamW with gradient
clipping and the warm-up + cosine schedule of ``TrainConfig``. Validation (held-out loss,
top-1 agreement, engine accept length) runs every ``validate_every`` steps and after the
last; a callback receives the head then (to save a checkpoint).

Under a time budget, the schedule is fitted to the budget once the first steps are timed,
so that it still ends (learning rate at its floor) within the budget, and refitted from the
latest window of steps every ``_RETIME_EVERY`` steps while less than ``_REFIT_UNTIL`` of the
budget is spent: early steps run slower (new batch shapes, allocator growth; on an H200 152 ms a
step over steps 10-40 against 54 ms on average over 5,000), so a single early estimate cut
runs to a third of what the budget allowed. The refit can lengthen the run back up to
``steps``; the learning rate follows without jumps (``recipe.Schedule``). Validation time is
left out of the step timing and budgeted apart, from the validations so far. A hard stop
guards it all.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import NamedTuple

import torch

from eagle_hal.backend import Backend
from eagle_hal.model.eagle import EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset
from eagle_hal.train.evaluate import ValidationPoint, engine_accept_length, top1_accuracy
from eagle_hal.train.features import FeatureStore
from eagle_hal.train.recipe import Schedule, TrainConfig
from eagle_hal.train.variants import head_variant, init_eagle1

__all__ = ["Checkpoint", "TrainResult", "init_eagle1", "train_eagle1", "train_head"]

_WARMUP_STEPS = 10  # untimed first steps (allocator, kernel selection, autotuning)
_TIMED_STEPS = 30  # steps timed after them before a time budget first fits the schedule
_RETIME_EVERY = 200  # then the schedule is refitted from the latest window of this many steps
_REFIT_UNTIL = 0.3  # ... while less than this share of the budget is spent
_BUDGET_RESERVE = 0.15  # share of the budget kept for validation and saving


class Checkpoint(NamedTuple):
    """What the validation callback receives: the head as it is now, and how it got here."""

    head: EagleDraftModel  # float32 master weights (do not modify)
    step: int
    validations: list[ValidationPoint]  # so far, the latest last
    feature_noise_half_width: float
    first_loss: float  # mean training loss over the first steps
    last_loss: float  # mean training loss over the latest steps


class TrainResult(NamedTuple):
    head: EagleDraftModel  # float32 master weights
    steps: int  # steps actually run
    first_loss: float  # mean training loss over the first steps
    last_loss: float  # mean training loss over the last steps
    validations: list[ValidationPoint]
    # EAGLE-1: absolute, after scaling by the features' RMS; EAGLE-3: relative to the RMS
    # of fc's output in each batch (HeadVariant.noise_half_width)
    feature_noise_half_width: float
    seconds: float


def train_head(
    backend: Backend,
    target: LlamaForCausalLM,
    dataset: DistillDataset,
    config: TrainConfig,
    *,
    features: FeatureStore | None = None,
    on_validation: Callable[[Checkpoint], None] | None = None,
    progress: bool = True,
) -> TrainResult:
    """Train a new ``config.variant`` head for ``target`` on ``dataset`` (features are
    computed when not given). Raises ``ValueError`` when the data set has no training or no
    validation sequence, or ``features`` hold other streams than the variant reads."""
    from tqdm import tqdm

    started = time.perf_counter()
    variant = head_variant(config.variant)
    train_ids, val_ids = dataset.train_indices(), dataset.validation_indices()
    if len(train_ids) == 0 or len(val_ids) == 0:
        raise ValueError("the data set needs both training and validation sequences")
    layers = variant.feature_layers(target)
    if features is not None and features.aux_layers != layers:
        raise ValueError(
            f"a {variant.name} head reads the streams of target layers {layers}, the "
            f"features given hold {features.aux_layers}"
        )
    target.requires_grad_(False)
    target.eval()
    device = target.device
    torch.manual_seed(config.seed)
    if features is None:
        features = FeatureStore.compute(
            target,
            dataset,
            aux_layers=layers,
            batch_tokens=config.feature_batch_tokens,
            progress=progress,
        )
    noise = variant.noise_half_width(config.feature_noise, features, train_ids)
    head = variant.init_head(
        target, config.seed, layers=config.draft_layers,
        intermediate_size=config.draft_intermediate_size,
    ).train()
    optimizer = torch.optim.AdamW(
        head.parameters(), lr=config.lr, betas=config.betas, weight_decay=config.weight_decay
    )
    autocast = target.dtype in (torch.bfloat16, torch.float16)
    shuffle = torch.Generator().manual_seed(config.seed)
    noise_generator = torch.Generator(device=device).manual_seed(config.seed)
    prompts = [dataset.prompt(i) for i in val_ids[: config.validation_prompts].tolist()]
    total_steps, order, cursor = config.steps, torch.empty(0, dtype=torch.int64), 0
    schedule = Schedule(config)
    losses: list[float] = []
    validations: list[ValidationPoint] = []
    bar = tqdm(
        total=total_steps,
        desc="training",
        unit=" steps",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    window_start, window_step = 0.0, 0  # the timing window: its clock and step at start
    validating = [0.0]  # seconds spent validating (not training steps)

    def validate(step: int) -> None:
        began = time.perf_counter()
        head.eval()
        loss, accuracy = top1_accuracy(
            head,
            target,
            dataset,
            features,
            val_ids,
            batch_size=config.batch_size,
            autocast=autocast,
        )
        accept = engine_accept_length(
            backend,
            target,
            head,
            prompts,
            draft_steps=config.validation_draft_steps,
            max_new_tokens=config.validation_new_tokens,
        )
        head.train()
        point = ValidationPoint(step, loss, accuracy, accept)
        validations.append(point)
        bar.write(
            f"step {step}: validation loss {loss:.4f}, top-1 {accuracy:.3f}, "
            f"accept length {accept:.2f} (chain S={config.validation_draft_steps})"
        )
        if on_validation is not None:
            first, last = _loss_ends(losses)
            on_validation(Checkpoint(head, step, list(validations), noise, first, last))
        validating[0] += time.perf_counter() - began

    step = 0
    while step < total_steps:
        if cursor + config.batch_size > len(order):  # a new epoch
            order = train_ids[torch.randperm(len(train_ids), generator=shuffle)]
            cursor = 0
        chunk = order[cursor : cursor + config.batch_size]
        cursor += config.batch_size
        rows = dataset.padded(chunk, device)
        with torch.autocast(device.type, dtype=target.dtype, enabled=autocast):
            parts = variant.loss(
                head,
                target,
                rows,
                features.rows(chunk, rows.tokens.shape[1]),
                step_weights=config.step_weights,
                noise_half_width=noise,
                regression_weight=config.regression_weight,
                cross_entropy_weight=config.cross_entropy_weight,
                generator=noise_generator,
            )
        for group in optimizer.param_groups:
            group["lr"] = schedule.learning_rate(step)
        optimizer.zero_grad(set_to_none=True)
        parts.total.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), config.grad_clip)
        optimizer.step()
        # one host sync a step, for the progress bar: the total, step 1's cross-entropy,
        # then every unroll step's top-1 agreement counts
        readback = torch.cat(
            [
                parts.total.detach().reshape(1),
                parts.cross_entropy.detach()[:1],
                parts.correct.float(),
                parts.count.float(),
            ]
        ).tolist()
        loss, cross_entropy, *tallies = readback
        unroll = config.unroll_steps
        top1 = [c / max(n, 1) for c, n in zip(tallies[:unroll], tallies[unroll:], strict=True)]
        losses.append(loss)
        step += 1
        bar.update(1)
        bar.set_postfix(
            loss=f"{loss:.4f}",
            ce=f"{cross_entropy:.3f}",
            top1="/".join(f"{t:.3f}" for t in top1),
            refresh=False,
        )
        budget = config.time_budget_s
        if budget is not None:
            now = time.perf_counter()
            elapsed = now - started
            if step == _WARMUP_STEPS:
                window_start, window_step = now - validating[0], step
            window = step - window_step
            first_window = window_step == _WARMUP_STEPS
            if (
                step > _WARMUP_STEPS
                and window == (_TIMED_STEPS if first_window else _RETIME_EVERY)
                and step < total_steps
                and (first_window or elapsed <= _REFIT_UNTIL * budget)
            ):
                per_step = (now - validating[0] - window_start) / window
                if validations:  # the validations still to come, spread over the steps
                    per_step += validating[0] / len(validations) / config.validate_every
                affordable = int((budget * (1 - _BUDGET_RESERVE) - elapsed) / per_step) + step
                fitted = max(step + 1, min(config.steps, affordable))
                if fitted != total_steps:
                    total_steps = fitted
                    schedule.refit(step, total_steps)
                    bar.total = total_steps
                    bar.write(
                        f"time budget: {per_step * 1000:.0f} ms a step, schedule set to "
                        f"{total_steps} steps"
                    )
                window_start, window_step = now - validating[0], step
            if elapsed > budget * (1 - _BUDGET_RESERVE / 2):
                bar.write(f"time budget reached after {step} steps; stopping")
                break
        if step % config.validate_every == 0 and step < total_steps:
            validate(step)
    bar.close()
    validate(step)
    first, last = _loss_ends(losses)
    return TrainResult(
        head=head,
        steps=step,
        first_loss=first,
        last_loss=last,
        validations=validations,
        feature_noise_half_width=noise,
        seconds=time.perf_counter() - started,
    )


train_eagle1 = train_head  # the name from before EAGLE-3 heads trained; any variant


def _loss_ends(losses: list[float]) -> tuple[float, float]:
    """Mean training loss over the first and the latest few steps."""
    if not losses:
        return float("nan"), float("nan")
    window = max(1, min(20, len(losses) // 5))
    return sum(losses[:window]) / window, sum(losses[-window:]) / window
