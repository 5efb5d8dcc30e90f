"""Shape and configuration checks shared by every SamplingOps implementation.

They read only shapes and host values, never tensor contents, so they cost no sync and
raise ``TreeConfigError`` before any device work is queued.
"""

from __future__ import annotations

import torch

from eagle_hal.hal.sampling import TreeConfigError
from eagle_hal.hal.tree_mask import TreeMaskMode

__all__ = [
    "check_dims",
    "check_mask_mode",
    "check_rows",
    "check_same_shape",
    "check_vocab",
    "next_power_of_2",
]

MAX_BIT_PACKED_NODES = 64  # one int64 per node holds one bit per visible node


def check_dims(name: str, tensor: torch.Tensor, ndim: int) -> None:
    if tensor.dim() != ndim:
        raise TreeConfigError(f"{name} must have {ndim} dims, got shape {tuple(tensor.shape)}")


def check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    if len(set(shapes.values())) > 1:
        raise TreeConfigError(f"shapes must match: {shapes}")


def check_rows(name: str, tensor: torch.Tensor, batch_size: int) -> None:
    if tensor.shape[0] != batch_size:
        raise TreeConfigError(
            f"{name} has {tensor.shape[0]} rows, expected the batch size {batch_size}"
        )


def check_mask_mode(mask_mode: str, num_nodes: int, seq_lens_sum: int | None) -> None:
    if mask_mode not in TreeMaskMode.ALL:
        raise TreeConfigError(f"unknown tree-mask mode {mask_mode!r}; known: {TreeMaskMode.ALL}")
    if mask_mode == TreeMaskMode.BIT_PACKED and num_nodes > MAX_BIT_PACKED_NODES:
        raise TreeConfigError(
            f"the bit-packed tree mask holds at most {MAX_BIT_PACKED_NODES} nodes, got "
            f"N = {num_nodes}; use TREE_BLOCK or FULL"
        )
    if mask_mode == TreeMaskMode.FULL and seq_lens_sum is None:
        raise TreeConfigError("the FULL tree mask needs seq_lens_sum (sum of seq_lens, host int)")


def check_vocab(logits: torch.Tensor, vocab_size: int) -> None:
    if logits.dim() < 1 or not 1 <= vocab_size <= logits.shape[-1]:
        raise TreeConfigError(
            f"vocab_size {vocab_size} must be in [1, {logits.shape[-1] if logits.dim() else 0}] "
            "(the logits' last dim, padded vocabulary included)"
        )


def next_power_of_2(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()
