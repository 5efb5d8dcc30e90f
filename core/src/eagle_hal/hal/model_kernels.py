"""The elementwise and normalisation kernels a model's layers call, chosen per backend.

A decoder layer's GEMMs are torch's; what lies between them (RMSNorm, the residual add,
rotary, the gated MLP's activation: SwiGLU's SiLU, or GELU-tanh for Gemma) is a handful
of tiny operations that a fused kernel does in one launch each. ``Backend.model_kernels()``
hands the model one ``ModelKernels``: the pure-torch reference
(``eagle_hal.ops.reference_model``) unless the backend has faster ones, such as the Triton
kernels of ``eagle_hal.ops.triton.model_kernels``. The model receives
it through ``eagle_hal.model.fusion.fuse_for_inference``.

Every implementation must match the reference's numerics: float32 statistics and angles,
each intermediate rounded to the activation dtype where the reference rounds it. Kernels
are for inference: they need not support autograd.

A backend may also fuse the projections themselves with what surrounds them
(``FusedLinearKernels``): for forwards of a few tokens, where every GEMM is a
matrix-vector product bound by its launch and weight read, a layer then takes four launches
besides attention instead of nine. Larger forwards keep the GEMMs and the kernels above.

The draft's next-token candidates, the top-k of a softmax over the whole vocabulary at every
draft step, may likewise take one pass over the logits (``softmax_topk``) instead of torch's
softmax and its multi-pass top-k.

The logits themselves, a product of a few hidden rows with the wide ``[V, H]`` vocabulary
matrix (the target's ``lm_head``, or a draft vocabulary's rows of it), may take a backend's
own GEMM (``logits``): on a CPU, torch's ``F.linear`` at this shape is several times slower
than the same product laid out the other way (``eagle_hal.backends.cpu.kernels``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

__all__ = ["FusedLinearKernels", "ModelKernels"]


@dataclasses.dataclass(frozen=True, slots=True)
class FusedLinearKernels:
    """Projections with their prologue and epilogue, for ``T <= max_tokens`` rows. Weights
    are ``[out, in]`` (``nn.Linear``'s), rows contiguous. ``residual`` ``None``: the
    input is ``x`` alone and the returned stream is ``x`` itself; otherwise the input is
    ``x + residual`` (rounded to ``x.dtype``), returned as the new stream. ``norm_weight``
    ``None``: no RMSNorm of the input. Numerics: those of the unfused ops (reference norm,
    rotary and gate, a GEMM rounding each output once), up to float32 summation order."""

    max_tokens: int
    # (x [T, In], residual, norm_weight [In] | None, eps, qkv_weight [(Hq + 2 Hk) D, In],
    #  qkv_bias | None, cos [T, D], sin [T, D], Hq, Hk) -> (q [T, Hq, D] and k [T, Hk, D]
    # rotated, v [T, Hk, D], stream [T, In]); q, k, v may be views of one buffer.
    qkv_rotary: Callable[..., tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]
    # (x [T, H], residual, norm_weight | None, eps, gate_up_weight [2 I, H])
    # -> (silu(gate) * up [T, I], stream [T, H])
    gate_up_silu: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    # (x [T, In], weight [Out, In], bias [Out] | None, add [T, Out] | None)
    # -> x @ weight.T + bias, rounded, then + add, rounded: [T, Out]
    linear: Callable[..., torch.Tensor]
    # 16-bit forwards take the fused path up to this many rows only (None: ``max_tokens``),
    # where larger ones run faster through the GEMMs
    max_tokens_16bit: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        limit = self.max_tokens_16bit
        if limit is not None and not 1 <= limit <= self.max_tokens:
            raise ValueError(f"max_tokens_16bit must be 1-{self.max_tokens} (max_tokens), "
                             f"got {limit}")


@dataclasses.dataclass(frozen=True, slots=True)
class ModelKernels:
    """One implementation of each model kernel. Shapes: ``T`` tokens, ``H`` hidden size."""

    name: str
    # (x [T, H], weight [H], eps) -> x / rms(x) * weight, [T, H] in x.dtype
    rms_norm: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor]
    # (x [T, H], residual [T, H], weight [H], eps) -> (rms_norm(x + residual), x + residual);
    # the sum is rounded to x.dtype before it is normalised. Inputs are left unchanged.
    add_rms_norm: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, float], tuple[torch.Tensor, torch.Tensor]
    ]
    # (q [T, Hq, D], k [T, Hk, D], cos [T, D], sin [T, D]) -> rotated (q, k), new tensors of
    # the same shapes (half-split pairing, as HF Llama). q and k may be strided views (rows
    # of a fused QKV output) whose last dimension is contiguous.
    rotary: Callable[
        [torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]
    ]
    # gate_up [T, 2 * I] (gate columns, then up columns) -> silu(gate) * up, [T, I]
    silu_mul: Callable[[torch.Tensor], torch.Tensor]
    # the projections fused with the kernels around them, for small forwards; None: GEMMs
    fused_linear: FusedLinearKernels | None = None
    # (logits [n, V] float16/bfloat16/float32, k) for any 1 <= k <= V -> the k largest of
    # softmax(logits.float(), -1), descending, float32 [n, k], and their ids, int64 [n, k];
    # equal probabilities go to the smaller id. None: torch's softmax and topk
    softmax_topk: Callable[[torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]] | None = None
    # (x [n, H], weight [V, H]) -> x @ weight.T, [n, V] contiguous in weight.dtype, for the
    # lm_head products (target logits, draft logits over the whole or a draft vocabulary);
    # numerics those of F.linear up to float32 summation order. None: F.linear
    logits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None
    # gate_up [T, 2 * I] (gate columns, then up columns) -> gelu_tanh(gate) * up, [T, I]
    # (GELU with the tanh approximation, Gemma's MLP), numerics those of torch's
    # gelu(gate, approximate="tanh") * up in the activation dtype. None: exactly that
    gelu_tanh_mul: Callable[[torch.Tensor], torch.Tensor] | None = None
