"""The library's defaults: what a backend hands out where it supplies nothing of its own.

``Backend.sampling_ops``, ``Backend.model_kernels`` and ``Backend.default_spec`` return
these unless a backend overrides them. They are implementations (the pure-torch reference
ops, the shared Triton kernels, ``SpecConfig``), so they sit above the contract in
``eagle_hal.backend``: the contract reaches them only when a backend asks for a default,
and nothing here imports the contract, so no import cycle runs through it. Each
implementation is imported on first use, so asking for the reference ops imports no
Triton.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.hal.model_kernels import ModelKernels
    from eagle_hal.hal.sampling import SamplingOps

__all__ = ["SPEC_KINDS", "check_spec_kind", "library_default_spec", "model_kernels",
           "sampling_ops"]

SPEC_KINDS = ("chain", "tree", "adaptive")


def check_spec_kind(kind: str) -> None:
    """``ValueError`` unless ``kind`` is one of ``SPEC_KINDS`` (``Backend.default_spec``)."""
    if kind not in SPEC_KINDS:
        raise ValueError(f"unknown spec kind {kind!r}; choose from {', '.join(SPEC_KINDS)}")


def sampling_ops() -> SamplingOps:
    """The pure-torch reference ``SamplingOps``: they run on any device torch runs on."""
    from eagle_hal.ops.reference import ReferenceSamplingOps

    return ReferenceSamplingOps()


def model_kernels(triton: bool, dependent_launch: bool = False) -> ModelKernels:
    """The shared Triton model kernels where ``triton`` says Triton runs on the device
    (``Capabilities.triton``), their projections launched as dependent launches where
    ``dependent_launch`` says the device has them (``Capabilities.dependent_launch``),
    else the pure-torch reference ones."""
    if triton:
        from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

        if dependent_launch:
            import dataclasses

            from eagle_hal.ops.triton.fused_linear import fused_linear_kernels

            return dataclasses.replace(
                TRITON_MODEL_KERNELS, fused_linear=fused_linear_kernels(dependent_launch=True))
        return TRITON_MODEL_KERNELS
    from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

    return REFERENCE_MODEL_KERNELS


def library_default_spec(kind: str = "chain") -> Any:
    """The library's default ``SpecConfig`` of ``kind``: a chain of S = 5, a tree of S = 5,
    K = 4, N = 16, and the adaptive mode over that tree (see ``Backend.default_spec``)."""
    from eagle_hal.speculative.config import SpecConfig

    check_spec_kind(kind)
    if kind == "chain":
        return SpecConfig()
    if kind == "tree":
        return SpecConfig(num_steps=5, topk=4, num_draft_tokens=16)
    # the adaptive mode narrows the tree past 256 verify tokens a batch (N = 4 at 64)
    return SpecConfig(num_steps=5, topk=4, num_draft_tokens=16, adaptive=True,
                      adaptive_verify_budget=256)
