"""Triton kernels for the fused ``SamplingOps`` (shared by the CUDA, ROCm and XPU backends).

Importing this package needs the ``triton`` package; the core never does. Kernels run on
any Triton target and, with ``TRITON_INTERPRET=1`` set before the import, on CPU tensors.
"""

from __future__ import annotations

try:
    import triton  # noqa: F401
except ImportError as error:  # pragma: no cover - depends on the environment
    raise ImportError(
        "eagle_hal.ops.triton needs the 'triton' package (pip install 'eagle-hal[triton]'); "
        "without it use eagle_hal.ops.reference.ReferenceSamplingOps, which needs only torch"
    ) from error

from eagle_hal.ops.triton.ops import TritonSamplingOps

__all__ = ["TritonSamplingOps"]
