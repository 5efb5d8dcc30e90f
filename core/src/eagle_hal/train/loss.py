"""EAGLE-1's training loss over a batch of padded sequences.

Alignment (as at inference, see ``spec.worker``): the draft at position ``i`` reads token
``x[i + 1]`` with the target's feature ``f[i]`` and predicts the next feature ``f[i + 1]``,
whose target distribution ``softmax(lm_head(f[i + 1]))`` is over token ``x[i + 2]``.
Positions count where that predicted token is a real answer token (or the first one, read
from the last prompt position): ``answer_start - 2 <= i <= length - 3``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F

from eagle_hal.model.eagle import Eagle1DraftModel
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import draft_forward

__all__ = ["LossParts", "eagle1_loss", "loss_mask"]


class LossParts(NamedTuple):
    """One batch's loss and its parts (scalars; ``correct``/``count`` are integer tensors)."""

    total: torch.Tensor
    regression: torch.Tensor
    cross_entropy: torch.Tensor
    correct: torch.Tensor  # positions where the head's argmax equals the target's
    count: torch.Tensor  # positions that count


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
