"""EAGLE-1's training loss over a batch of padded sequences.

Alignment (as at inference, see ``speculative.worker``): the draft at position ``i`` reads token
``x[i + 1]`` with the target's feature ``f[i]`` and predicts the next feature ``f[i + 1]``,
whose target distribution ``softmax(lm_head(f[i + 1]))`` is over token ``x[i + 2]``.
Positions count where that predicted token is a real answer token (or the first one, read
from the last prompt position): ``answer_start - 2 <= i <= length - 3``.

``unrolled_eagle1_loss`` adds the later steps of a draft chain (``train.unrolled``): step
``s`` at position ``i`` predicts the same ``f[i + 1]`` from the head's own step ``s - 1``
output, and counts the positions step 1 counts that have a chain origin,
``i - s + 1 >= 0``. One step is ``eagle1_loss``, bit for bit.

``unrolled_loss`` is that alignment, masking and per-step bookkeeping for any head: it
takes step 1's input features and whether to regress, so EAGLE-1 (the target's features,
regression and cross-entropy) and EAGLE-3 (``train.eagle3``: ``fc`` over the target's
layer streams, cross-entropy alone) are thin callers of one loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from eagle_hal.model.eagle import Eagle1DraftModel, EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import draft_forward
from eagle_hal.train.unrolled import unrolled_draft_forward

__all__ = [
    "LossParts",
    "UnrolledLossParts",
    "add_uniform_noise",
    "eagle1_loss",
    "loss_mask",
    "unrolled_eagle1_loss",
    "unrolled_loss",
]


class LossParts(NamedTuple):
    """One batch's loss and its parts (scalars; ``correct``/``count`` are integer tensors)."""

    total: torch.Tensor
    regression: torch.Tensor
    cross_entropy: torch.Tensor
    correct: torch.Tensor  # positions where the head's argmax equals the target's
    count: torch.Tensor  # positions that count


class UnrolledLossParts(NamedTuple):
    """One batch's unrolled loss: the weighted total (scalar) and every step's parts ``[S]``
    (``correct``/``count`` are integer tensors)."""

    total: torch.Tensor
    regression: torch.Tensor  # [S]
    cross_entropy: torch.Tensor  # [S]
    correct: torch.Tensor  # [S] positions where step s's argmax equals the target's
    count: torch.Tensor  # [S] positions step s counts


def loss_mask(rows: PaddedRows) -> torch.Tensor:
    """Which draft positions ``i`` ``[B, L - 1]`` count (see the module docstring)."""
    width = rows.tokens.shape[1] - 1
    position = torch.arange(width, device=rows.tokens.device)[None, :]  # [1, L - 1]
    return (position >= rows.answer_starts[:, None] - 2) & (position <= rows.lengths[:, None] - 3)


def eagle1_loss(
    head: Eagle1DraftModel,
    target: LlamaForCausalLM,
    rows: PaddedRows,
    features: torch.Tensor,
    *,
    noise_half_width: float = 0.0,
    regression_weight: float = 1.0,
    cross_entropy_weight: float = 0.1,
    generator: torch.Generator | None = None,
) -> LossParts:
    """The EAGLE-1 loss of ``head`` on ``rows`` with the target's ``features`` ``[B, L, H]``.

    Smooth-L1 between predicted and true next features (mean over counted positions and
    hidden units) plus the soft cross-entropy of the head's logits against the target's
    next-token distribution. ``noise_half_width`` adds uniform noise to the input features.
    Raises ``ValueError`` when no position counts.
    """
    mask = loss_mask(rows)  # [B, L - 1]
    if not bool(mask.any()):
        raise ValueError("no position of this batch counts: every answer is empty")
    hidden_in = features[:, :-1]  # [B, L - 1, H]
    if noise_half_width > 0:
        hidden_in = add_uniform_noise(hidden_in, noise_half_width, generator)
    predicted = draft_forward(head, rows.tokens[:, 1:], hidden_in)[mask]  # [M, H]
    true_next = features[:, 1:][mask]  # [M, H]
    regression = F.smooth_l1_loss(predicted.float(), true_next.float())
    with torch.no_grad():
        target_logits = target.compute_logits(true_next)  # [M, V] float32
        target_probs = torch.softmax(target_logits, dim=-1)
    draft_logits = head.compute_logits(predicted)  # [M, V] float32
    cross_entropy = -(target_probs * torch.log_softmax(draft_logits, dim=-1)).sum(-1).mean()
    total = regression_weight * regression + cross_entropy_weight * cross_entropy
    correct = (draft_logits.argmax(-1) == target_logits.argmax(-1)).sum()
    return LossParts(total, regression, cross_entropy, correct, mask.sum())


def unrolled_eagle1_loss(
    head: Eagle1DraftModel,
    target: LlamaForCausalLM,
    rows: PaddedRows,
    features: torch.Tensor,
    *,
    step_weights: Sequence[float] = (1.0,),
    noise_half_width: float = 0.0,
    regression_weight: float = 1.0,
    cross_entropy_weight: float = 0.1,
    generator: torch.Generator | None = None,
) -> UnrolledLossParts:
    """The EAGLE-1 loss of ``head`` unrolled ``len(step_weights)`` steps (see
    ``train.unrolled``): ``sum_s w_s * (regression_weight * regression_s +
    cross_entropy_weight * cross_entropy_s)``, each step's parts as in ``eagle1_loss`` over
    the positions it counts. Step 1 reads the target's features, with noise on them only.
    Raises ``ValueError`` when no position counts or ``step_weights`` is empty.
    """
    hidden_in = features[:, :-1]  # [B, L - 1, H]
    if noise_half_width > 0:
        hidden_in = add_uniform_noise(hidden_in, noise_half_width, generator)
    return unrolled_loss(
        head,
        target,
        rows,
        hidden_in,
        features,
        step_weights=step_weights,
        regression_weight=regression_weight,
        cross_entropy_weight=cross_entropy_weight,
    )


def add_uniform_noise(
    hidden: torch.Tensor,
    half_width: float | torch.Tensor,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """``hidden`` plus uniform noise in ``[-half_width, half_width)`` (a float, or a scalar
    tensor, kept on the device), drawn from ``generator``, in ``hidden``'s dtype."""
    noise = torch.rand(hidden.shape, generator=generator, device=hidden.device)
    return hidden + ((2 * noise - 1) * half_width).to(hidden.dtype)


def unrolled_loss(
    head: EagleDraftModel,
    target: LlamaForCausalLM,
    rows: PaddedRows,
    hidden_in: torch.Tensor,
    final_features: torch.Tensor,
    *,
    step_weights: Sequence[float] = (1.0,),
    regression_weight: float | None = 1.0,
    cross_entropy_weight: float = 0.1,
) -> UnrolledLossParts:
    """Any head's loss unrolled ``len(step_weights)`` steps: step 1 reads ``hidden_in``
    ``[B, L - 1, H]`` (position ``i`` with token ``x[i + 1]``: the variant's input feature of
    position ``i``, noise already added), later steps the head's own outputs
    (``train.unrolled``). Every step is scored against the target's next-token distribution
    from ``final_features`` ``[B, L, H]`` (the target's final normed states), and, unless
    ``regression_weight`` is ``None``, regressed onto ``final_features[:, i + 1]``
    (``parts.regression`` then holds zeros). The target's distributions are computed once
    for all steps. Raises ``ValueError`` when no position counts or ``step_weights`` is
    empty.
    """
    if not step_weights:
        raise ValueError("step_weights needs one weight per unroll step, got none")
    mask = loss_mask(rows)  # [B, L - 1]
    counted = mask.reshape(-1).nonzero()[:, 0]  # [M] flat indices (the step's one host sync)
    if counted.numel() == 0:
        raise ValueError("no position of this batch counts: every answer is empty")
    outputs = unrolled_draft_forward(head, rows.tokens[:, 1:], hidden_in, len(step_weights))
    hidden_size = final_features.shape[-1]
    true_next = final_features[:, 1:].reshape(-1, hidden_size)[counted]  # [M, H]
    position = counted % mask.shape[1]  # [M] draft position i of each counted row
    with torch.no_grad():
        target_logits = target.compute_logits(true_next)  # [M, V] float32
        target_probs = torch.softmax(target_logits, dim=-1)
        target_top = target_logits.argmax(-1)  # [M]
    regressions, entropies, corrects, counts = [], [], [], []
    for step, output in enumerate(outputs, start=1):
        predicted = output.reshape(-1, output.shape[-1])[counted]  # [M, H]
        draft_logits = head.compute_logits(predicted)  # [M, V] float32
        entropy = -(target_probs * torch.log_softmax(draft_logits, dim=-1)).sum(-1)  # [M]
        agrees = draft_logits.argmax(-1) == target_top  # [M]
        regression = entropy.new_zeros(())  # no regression term: reported as 0
        if step == 1:  # every counted position has a chain origin: eagle1_loss's expressions
            if regression_weight is not None:
                regression = F.smooth_l1_loss(predicted.float(), true_next.float())
            entropy, correct, count = entropy.mean(), agrees.sum(), mask.sum()
        else:
            keep = position >= step - 1  # [M] the chain's origin i - s + 1 >= 0
            count = keep.sum()
            denominator = count.clamp(min=1).float()
            if regression_weight is not None:
                elementwise = F.smooth_l1_loss(
                    predicted.float(), true_next.float(), reduction="none"
                )
                regression = (elementwise.mean(-1) * keep).sum() / denominator
            entropy, correct = (entropy * keep).sum() / denominator, (agrees & keep).sum()
        regressions.append(regression)
        entropies.append(entropy)
        corrects.append(correct)
        counts.append(count)
    terms = [
        weight * (cross_entropy_weight * entropy)
        if regression_weight is None
        else weight * (regression_weight * regression + cross_entropy_weight * entropy)
        for weight, regression, entropy in zip(step_weights, regressions, entropies, strict=True)
    ]
    total = terms[0]
    for term in terms[1:]:
        total = total + term
    return UnrolledLossParts(
        total,
        torch.stack(regressions),
        torch.stack(entropies),
        torch.stack(corrects),
        torch.stack(counts),
    )
