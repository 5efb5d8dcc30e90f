"""The layouts in which the core hands a verify tree's attention mask to a backend.

A backend names the layouts its verify attention reads (``Capabilities.tree_mask_modes``)
and the one an attention backend asks for (``AttentionBackend.tree_mask_mode``); the
sampling ops build the mask in that layout (``SamplingOps.build_verify_tree``). This module
imports nothing, so the contract types above it stay cheap to import.
"""

from __future__ import annotations

__all__ = ["TreeMaskMode"]


class TreeMaskMode:
    """The layouts in which the core can hand a verify tree's attention mask to a backend."""

    FULL = "full"  # per request: prefix columns plus the N x N tree block, [B, N, prefix + N]
    TREE_BLOCK = "tree_block"  # only the tree block, [B, N, N] (prefix is always visible)
    BIT_PACKED = "bit_packed"  # one integer per node, bit j set if node j is visible, [B, N]

    ALL: tuple[str, ...] = (FULL, TREE_BLOCK, BIT_PACKED)
