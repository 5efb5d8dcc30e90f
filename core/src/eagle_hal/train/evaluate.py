"""Validation of a head in training: what the engine would accept, and top-1 agreement.

* ``engine_accept_length``: the held-out prompts decoded greedily by the real engine with
  the head (a chain of S draft steps): tokens emitted per target verify pass.
* ``top1_accuracy``: on held-out sequences, how often the head's most likely next token
  equals the target's greedy token, reading the target's true features (teacher forcing).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch

from eagle_hal.backend import Backend
from eagle_hal.model.eagle import EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset
from eagle_hal.train.features import FeatureStore
from eagle_hal.train.variants import variant_of

__all__ = ["ValidationPoint", "copy_head", "engine_accept_length", "top1_accuracy"]


class ValidationPoint(NamedTuple):
    step: int
    loss: float  # validation loss (no noise)
    top1_accuracy: float
    accept_length: float  # engine, greedy, chain


def copy_head(
    head: EagleDraftModel, target: LlamaForCausalLM, dtype: torch.dtype
) -> EagleDraftModel:
    """A copy of ``head``'s weights in ``dtype`` (for inference or saving), sharing the
    target's embedding (and EAGLE-1's ``lm_head``): its variant's ``copy_head``."""
    return variant_of(head).copy_head(head, target, dtype)


def engine_accept_length(
    backend: Backend,
    target: LlamaForCausalLM,
    head: EagleDraftModel,
    prompts: Sequence[Sequence[int]],
    *,
    draft_steps: int = 5,
    max_new_tokens: int = 128,
) -> float:
    """Mean accept length (emitted tokens per verify pass, over all prompts together) of
    greedy chain decoding with ``head`` (copied into the target's dtype) on ``backend``."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig

    inference_head = copy_head(head, target, target.dtype)
    longest = max(len(p) for p in prompts)
    llm = LLM.from_models(
        backend,
        target,
        inference_head,
        None,
        SpecConfig(num_steps=draft_steps, topk=1),
        max_batch_size=len(prompts),
        max_context=longest + max_new_tokens + 2 * draft_steps + 8,
        seed=0,
    )
    outputs = llm.generate(
        [list(p) for p in prompts], SamplingParams(max_tokens=max_new_tokens)
    )
    verify_steps = sum(o.stats.verify_steps for o in outputs)
    accepted = sum(o.stats.accepted_tokens for o in outputs)
    return accepted / verify_steps if verify_steps else 0.0


@torch.no_grad()
def top1_accuracy(
    head: EagleDraftModel,
    target: LlamaForCausalLM,
    dataset: DistillDataset,
    features: FeatureStore,
    indices: torch.Tensor,
    *,
    batch_size: int = 32,
    autocast: bool = False,
) -> tuple[float, float]:
    """``(loss, top-1 accuracy)`` of ``head`` over sequences ``indices``: one draft step
    reading the target's features, without noise; the loss under the variant's default
    weights whatever the run's (EAGLE-1: ``eagle1_loss``'s), so it compares across runs."""
    variant = variant_of(head)
    device = features.device
    total_loss, correct, count = 0.0, 0, 0
    for chunk in indices.split(batch_size):
        rows = dataset.padded(chunk, device)
        with torch.autocast(device.type, dtype=target.dtype, enabled=autocast):
            parts = variant.loss(
                head,
                target,
                rows,
                features.rows(chunk, rows.tokens.shape[1]),
                step_weights=(1.0,),
                noise_half_width=0.0,
                regression_weight=variant.default_regression_weight,
                cross_entropy_weight=variant.default_cross_entropy_weight,
            )
        total_loss += float(parts.total) * int(parts.count[0])
        correct += int(parts.correct[0])
        count += int(parts.count[0])
    return total_loss / max(count, 1), correct / max(count, 1)
