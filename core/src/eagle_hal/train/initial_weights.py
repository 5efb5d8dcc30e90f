"""How a fresh draft head's weights start, for every head variant alike."""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

__all__ = ["draw_initial_weights"]


def draw_initial_weights(
    head: nn.Module, seed: int, copies: Mapping[str, torch.Tensor] | None = None
) -> None:
    """Set ``head``'s parameters in name order: those named in ``copies`` to a float copy of
    the tensor given, norm weights to 1, biases to 0, every other weight to N(0, 0.02)
    drawn from ``seed``."""
    copies = copies or {}
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(head.named_parameters()):
            if name in copies:
                param.copy_(copies[name].detach().float())
            elif name.endswith("norm.weight"):
                param.fill_(1.0)
            elif name.endswith("bias"):
                param.zero_()
            else:
                param.copy_(0.02 * torch.randn(param.shape, generator=generator))
