"""EAGLE-1's training loss over a batch of padded sequences.

Alignment (as at inference, see ``spec.worker``): the draft at position ``i`` reads token
``x[i + 1]`` with the target's feature ``f[i]`` and predicts the next feature ``f[i + 1]``,
whose target distribution ``softmax(lm_head(f[i + 1]))`` is over token ``x[i + 2]``.
Positions count where that predicted token is a real answer token (or the first one, read
from the last prompt position): ``answer_start - 2 <= i <= length - 3``.

``unrolled_eagle1_loss`` adds the later steps of a draft chain (``train.unrolled``): step
``s`` at position ``i`` predicts the same ``f[i + 1]`` from the head's own step ``s - 1``
output, and counts the positions step 1 counts that have a chain origin,
``i - s + 1 >= 0``. One step is ``eagle1_loss``, bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
import torch.nn.functional as F

from eagle_hal.model.eagle import Eagle1DraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import draft_forward
from eagle_hal.train.unrolled import unrolled_draft_forward

__all__ = ["LossParts", "UnrolledLossParts", "eagle1_loss", "loss_mask", "unrolled_eagle1_loss"]


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
        noise = torch.rand(hidden_in.shape, generator=generator, device=hidden_in.device)
        hidden_in = hidden_in + ((2 * noise - 1) * noise_half_width).to(hidden_in.dtype)
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
    the positions it counts. Noise goes on step 1's input features only. The target's
    distributions are computed once for all steps. Raises ``ValueError`` when no position
    counts or ``step_weights`` is empty.
    """
    if not step_weights:
        raise ValueError("step_weights needs one weight per unroll step, got none")
    mask = loss_mask(rows)  # [B, L - 1]
    counted = mask.reshape(-1).nonzero()[:, 0]  # [M] flat indices (the step's one host sync)
    if counted.numel() == 0:
        raise ValueError("no position of this batch counts: every answer is empty")
    hidden_in = features[:, :-1]  # [B, L - 1, H]
    if noise_half_width > 0:
        noise = torch.rand(hidden_in.shape, generator=generator, device=hidden_in.device)
        hidden_in = hidden_in + ((2 * noise - 1) * noise_half_width).to(hidden_in.dtype)
    outputs = unrolled_draft_forward(head, rows.tokens[:, 1:], hidden_in, len(step_weights))
    hidden_size = features.shape[-1]
    true_next = features[:, 1:].reshape(-1, hidden_size)[counted]  # [M, H]
    position = counted % mask.shape[1]  # [M] draft position i of each counted row
    with torch.no_grad():
        target_logits = target.compute_logits(true_next)  # [M, V] float32
        target_probs = torch.softmax(target_logits, dim=-1)
        target_top = target_logits.argmax(-1)  # [M]
    regressions, entropies, corrects, counts = [], [], [], []
    for step, output in enumerate(outputs, start=1):
        predicted = output.reshape(-1, hidden_size)[counted]  # [M, H]
        draft_logits = head.compute_logits(predicted)  # [M, V] float32
        entropy = -(target_probs * torch.log_softmax(draft_logits, dim=-1)).sum(-1)  # [M]
        agrees = draft_logits.argmax(-1) == target_top  # [M]
        if step == 1:  # every counted position has a chain origin: eagle1_loss's expressions
            regressions.append(F.smooth_l1_loss(predicted.float(), true_next.float()))
            entropies.append(entropy.mean())
            corrects.append(agrees.sum())
            counts.append(mask.sum())
            continue
        keep = position >= step - 1  # [M] the chain's origin i - s + 1 >= 0
        count = keep.sum()
        denominator = count.clamp(min=1).float()
        elementwise = F.smooth_l1_loss(predicted.float(), true_next.float(), reduction="none")
        regressions.append((elementwise.mean(-1) * keep).sum() / denominator)
        entropies.append((entropy * keep).sum() / denominator)
        corrects.append((agrees & keep).sum())
        counts.append(count)
    terms = [
        weight * (regression_weight * regression + cross_entropy_weight * entropy)
        for weight, regression, entropy in zip(step_weights, regressions, entropies)
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
