"""The blocks every Llama-family model and EAGLE head is built from.

RMSNorm, rotary position embedding (with linear, llama3 and explicit-factor scaling), the
SwiGLU MLP and the attention block. The attention block owns the Q/K/V/O projections and
the rotary rotation; the attention itself (KV write, paged gather, masking) is the
``AttentionBackend``'s, called once per layer as ``attn.forward(layer_id, q, k, v, batch)``.

What lies between the GEMMs (norms, residual adds, rotary, SwiGLU's gate) goes through the
module's ``kernels`` (a ``ModelKernels``): the pure-torch reference unless
``eagle_hal.model.fusion.fuse_for_inference`` installed a backend's. For inference the
Q/K/V and gate/up projections can also run as one GEMM each (``fuse_projections``); the
parameters keep their names and become views of the fused weight. Forwards of a few tokens
then run each projection fused with its neighbours where the kernels offer it
(``ModelKernels.fused_linear``, see ``fused_kernels_for``).

Numerics follow Hugging Face transformers' Llama: RMSNorm and rotary angles in float32,
cast back to the activation dtype before the weight multiply / rotation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from eagle_hal.hal.attention import AttentionBackend, ForwardBatch
from eagle_hal.hal.model_kernels import FusedLinearKernels, ModelKernels
from eagle_hal.model.config import ModelConfig, RopeScaling, RopeScalingKind
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS, apply_rotary

__all__ = [
    "Attention",
    "DecoderLayer",
    "SandwichDecoderLayer",
    "MLP",
    "RMSNorm",
    "RotaryEmbedding",
    "apply_rotary",
    "fuse_linears",
    "fused_kernels_for",
    "lm_head_logits",
]


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, normalised in float32."""

    kernels: ModelKernels = REFERENCE_MODEL_KERNELS

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.kernels.rms_norm(x, self.weight, self.eps)

    def add_norm(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(x + residual), x + residual)`` in one kernel where the backend has one."""
        return self.kernels.add_rms_norm(x, residual, self.weight, self.eps)


def _gelu_tanh_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``gelu_tanh(gate) * up`` of ``gate_up`` ``[T, 2 * I]``, for kernels without one."""
    gate, up = gate_up.chunk(2, dim=-1)
    return F.gelu(gate, approximate="tanh") * up


def fuse_linears(linears: list[nn.Linear]) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Concatenate the weights (and biases) of ``linears`` along the output features, then
    make each module's parameters views of the result: names, ``state_dict`` and loading
    stay as they were, and no memory is duplicated. The parameters stop requiring grad.
    Returns ``(weight [sum(out), in], bias [sum(out)] or None)``."""
    with torch.no_grad():
        weight = torch.cat([linear.weight.detach() for linear in linears])
        biases = [linear.bias for linear in linears]
        bias = None if biases[0] is None else torch.cat([b.detach() for b in biases])
        start = 0
        for linear in linears:
            stop = start + linear.weight.shape[0]
            linear.weight = nn.Parameter(weight[start:stop], requires_grad=False)
            if bias is not None:
                linear.bias = nn.Parameter(bias[start:stop], requires_grad=False)
            start = stop
    return weight, bias


def _views_of(fused: torch.Tensor | None, linears: list[nn.Linear]) -> bool:
    """Whether ``linears``' weights are still the consecutive rows of ``fused`` (a ``.to()``
    or a reassigned parameter breaks this; then the projections must be fused again)."""
    if fused is None:
        return False
    start = 0
    for linear in linears:
        weight = linear.weight
        if weight.device != fused.device or weight.dtype != fused.dtype:
            return False
        if weight.data_ptr() != fused[start].data_ptr():
            return False
        start += weight.shape[0]
    return start == fused.shape[0]


def _inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling) -> torch.Tensor:
    """Rotary inverse frequencies ``[head_dim // 2]`` (float32) after scaling."""
    exponents = torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim
    inv_freq = 1.0 / (theta**exponents)
    if scaling.kind is RopeScalingKind.LINEAR:
        return inv_freq / scaling.factor
    if scaling.kind is RopeScalingKind.FREQUENCY_FACTORS:
        return inv_freq / torch.tensor(scaling.frequency_factors, dtype=torch.float32)
    if scaling.kind is RopeScalingKind.LLAMA3:
        # Wavelengths longer than the original context are stretched by ``factor``; shorter
        # than original/high_freq_factor are kept; in between, interpolate linearly in
        # ``original / wavelength``.
        original = scaling.original_max_position_embeddings
        wavelength = 2 * math.pi / inv_freq
        stretched = inv_freq / scaling.factor
        ratio = original / wavelength
        blend = (ratio - scaling.low_freq_factor) / (
            scaling.high_freq_factor - scaling.low_freq_factor
        )
        blended = (1 - blend) * stretched + blend * inv_freq
        scaled = torch.where(wavelength > original / scaling.low_freq_factor, stretched, inv_freq)
        medium = (wavelength <= original / scaling.low_freq_factor) & (
            wavelength >= original / scaling.high_freq_factor
        )
        return torch.where(medium, blended, scaled)
    return inv_freq


class RotaryEmbedding:
    """Rotary angles for a batch of positions. Not an ``nn.Module``: its inverse frequencies
    stay float32 on the device they were built for, whatever dtype the model is cast to.

    ``prepare`` tabulates cos and sin for every position the model takes (its
    ``max_position_embeddings``, and the engine's context if longer): a forward then gathers
    its rows with one operation instead of computing them with seven (cast, product,
    concatenation, cos, sin, two casts), a device kernel each, in every forward of a
    speculative iteration (the ``ModelRunner`` prepares its models)."""

    MAX_TABLE_POSITIONS = 16384  # longer contexts compute per forward (a table of 16 MB+)

    def __init__(self, config: ModelConfig, device: torch.device | str) -> None:
        self.inv_freq = _inverse_frequencies(
            config.head_dim, config.rope_theta, config.rope_scaling
        ).to(device)  # [head_dim // 2]
        self.max_positions = config.max_position_embeddings
        self._tables: dict[torch.dtype, torch.Tensor] = {}  # dtype -> [2, positions, head_dim]

    def prepare(self, dtype: torch.dtype, context: int = 0) -> bool:
        """Tabulate cos/sin in ``dtype`` on the device (outside any graph capture) for the
        model's positions and at least ``context`` (an engine's context, which a draft head
        with a smaller ``max_position_embeddings`` than its target's still reaches); whether
        a table is in use (not past ``MAX_TABLE_POSITIONS``). Idempotent."""
        size = max(self.max_positions, context)
        if size > self.MAX_TABLE_POSITIONS:
            return False
        table = self._tables.get(dtype)
        if table is None or table.shape[1] < size:
            positions = torch.arange(size, device=self.inv_freq.device)
            self._tables[dtype] = torch.stack(self._compute(positions, dtype))
        return True

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``/``sin`` ``[T, head_dim]`` for ``positions`` ``[T]`` (each within the
        table ``prepare`` made, if any); once per forward."""
        table = self._tables.get(dtype)
        if table is None or table.device != positions.device:
            return self._compute(positions, dtype)
        rows = table.index_select(1, positions)  # [2, T, head_dim]
        return rows[0], rows[1]

    def _compute(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        angles = positions.float()[:, None] * self.inv_freq[None, :]  # [T, head_dim // 2]
        angles = torch.cat([angles, angles], dim=-1)  # [T, head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)


class MLP(nn.Module):
    """A gated MLP: ``down(act(gate(x)) * up(x))``, ``act`` SiLU (SwiGLU) or, for
    ``activation="gelu_tanh"`` (Gemma), GELU with the tanh approximation."""

    kernels: ModelKernels = REFERENCE_MODEL_KERNELS

    def __init__(self, hidden_size: int, intermediate_size: int,
                 activation: str = "silu") -> None:
        super().__init__()
        self.activation = activation
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
        self._gate_up: torch.Tensor | None = None  # [2 * intermediate, hidden] once fused

    def fuse_projections(self) -> None:
        """Run gate and up as one GEMM from now on (for inference; idempotent)."""
        pair = [self.gate_proj, self.up_proj]
        if not _views_of(self._gate_up, pair):
            self._gate_up, _ = fuse_linears(pair)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gelu = self.activation == "gelu_tanh"
        if self._gate_up is None:
            gate = self.gate_proj(x)
            gate = F.gelu(gate, approximate="tanh") if gelu else F.silu(gate)
            return self.down_proj(gate * self.up_proj(x))
        gate_up = F.linear(x, self._gate_up)  # [T, 2 * intermediate]
        if not gelu:
            return self.down_proj(self.kernels.silu_mul(gate_up))
        kernel = self.kernels.gelu_tanh_mul or _gelu_tanh_mul
        return self.down_proj(kernel(gate_up))

    def forward_fused(
        self,
        fused: FusedLinearKernels,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        norm: RMSNorm,
        *,
        add_stream: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward(norm(x + residual))`` in two fused launches, plus the stream
        ``x + residual`` itself if ``add_stream``; returns it with the stream (``x`` when
        ``residual`` is ``None``)."""
        assert self._gate_up is not None
        activated, stream = fused.gate_up_silu(x, residual, norm.weight, norm.eps, self._gate_up)
        add = stream if add_stream else None
        return fused.linear(activated, self.down_proj.weight, None, add), stream


class Attention(nn.Module):
    """Q/K/V projections, rotary, the backend's attention for layer ``layer_id``, O projection.

    ``input_size`` defaults to the hidden size; EAGLE-3's draft layer reads ``2 * hidden``.
    With ``config.qk_norm`` (Qwen3, Gemma 3) each head's query and key are RMS-normalised
    over ``head_dim`` (``q_norm``, ``k_norm``) before the rotation.
    """

    kernels: ModelKernels = REFERENCE_MODEL_KERNELS

    def __init__(
        self,
        config: ModelConfig,
        layer_id: int,
        input_size: int | None = None,
        qkv_bias: bool | None = None,
    ) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.num_heads, self.num_kv_heads = config.num_heads, config.num_kv_heads
        self.head_dim = config.head_dim
        in_size = input_size or config.hidden_size
        bias = config.attention_bias if qkv_bias is None else qkv_bias
        self.q_proj = nn.Linear(in_size, self.num_heads * self.head_dim, bias=bias)
        self.k_proj = nn.Linear(in_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.v_proj = nn.Linear(in_size, self.num_kv_heads * self.head_dim, bias=bias)
        self.o_proj = nn.Linear(
            self.num_heads * self.head_dim, config.hidden_size, bias=config.attention_out_bias
        )
        self._qkv: tuple[torch.Tensor, torch.Tensor | None] | None = None  # (weight, bias)
        self.q_norm: RMSNorm | None = None
        self.k_norm: RMSNorm | None = None
        if config.qk_norm:
            self.q_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.rms_norm_eps)
        # attention backends scale scores by head_dim ** -0.5 (every engine builds them so);
        # a model of another scale (Gemma's query_pre_attn_scalar) multiplies q by the ratio
        self.query_scale = 1.0
        if config.attention_scale is not None:
            self.query_scale = config.attention_scale * self.head_dim**0.5

    def fuse_projections(self) -> None:
        """Run Q, K and V as one GEMM from now on (for inference; idempotent). Fuses what
        the modules hold, so a tensor-parallel rank fuses its own heads."""
        projections = [self.q_proj, self.k_proj, self.v_proj]
        if self._qkv is None or not _views_of(self._qkv[0], projections):
            self._qkv = fuse_linears(projections)

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        """``x`` ``[T, input_size]`` -> ``[T, hidden]``; writes this layer's K/V (via ``attn``)."""
        num_tokens = x.shape[0]
        q_size, kv_size = self.num_heads * self.head_dim, self.num_kv_heads * self.head_dim
        if self._qkv is None:
            q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        else:
            qkv = F.linear(x, *self._qkv)  # [T, q_size + 2 * kv_size]
            q, k, v = qkv.split([q_size, kv_size, kv_size], dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None and self.k_norm is not None:
            # one row per head: the norm kernels take [rows, width]
            q = self.q_norm(q.reshape(-1, self.head_dim)).view(q.shape)
            k = self.k_norm(k.reshape(-1, self.head_dim)).view(k.shape)
        if self.query_scale != 1.0:
            q = q * self.query_scale
        q, k = self.kernels.rotary(q, k, *rotary)
        out = attn.forward(self.layer_id, q, k, v, batch)  # [T, num_heads, head_dim]
        return self.o_proj(out.reshape(num_tokens, q_size))

    def forward_fused(
        self,
        fused: FusedLinearKernels,
        x: torch.Tensor,
        residual: torch.Tensor | None,
        norm: RMSNorm | None,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``forward(norm(x + residual))`` (no norm when ``norm`` is ``None``) with the
        projections in fused launches; returns it with the stream ``x + residual``."""
        assert self._qkv is not None
        weight, bias = self._qkv
        q, k, v, stream = fused.qkv_rotary(
            x, residual, norm.weight if norm is not None else None,
            norm.eps if norm is not None else 0.0, weight, bias, *rotary, self.num_heads,
            self.num_kv_heads,
        )
        out = attn.forward(self.layer_id, q, k, v, batch)  # [T, num_heads, head_dim]
        out = out.reshape(x.shape[0], self.num_heads * self.head_dim)
        return fused.linear(out, self.o_proj.weight, self.o_proj.bias, None), stream


def lm_head_logits(kernels: ModelKernels, lm_head: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``lm_head(x)``, through ``kernels.logits`` where there is one and ``lm_head`` is a
    plain ``nn.Linear`` (a vocabulary-parallel head is called as a module: it gathers its
    shards)."""
    if kernels.logits is not None and type(lm_head) is nn.Linear:
        return kernels.logits(x, lm_head.weight)
    return lm_head(x)


def fused_kernels_for(
    x: torch.Tensor, attention: Attention, mlp: MLP
) -> FusedLinearKernels | None:
    """The fused projection kernels for a forward of ``x``'s rows through ``attention`` and
    ``mlp``, or ``None`` for the unfused path: when the installed kernels have them, ``x``
    has at most their ``max_tokens`` rows of a 16- or 32-bit float (16-bit: at most
    ``max_tokens_16bit``), both modules' projections are fused and every projection is a
    plain ``nn.Linear`` (a tensor-parallel shard's is not) without a down-projection bias,
    the attention has no per-head q/k norm and the MLP's activation is SiLU."""
    fused = attention.kernels.fused_linear
    if fused is None:
        return None
    limit = fused.max_tokens
    if x.dtype in (torch.float16, torch.bfloat16) and fused.max_tokens_16bit is not None:
        limit = min(limit, fused.max_tokens_16bit)
    if not 0 < x.shape[0] <= limit:
        return None
    if x.dtype not in (torch.float16, torch.bfloat16, torch.float32):
        return None
    if attention._qkv is None or mlp._gate_up is None or mlp.down_proj.bias is not None:
        return None
    if attention.q_norm is not None:  # the fused QKV launch rotates without a q/k norm
        return None
    if mlp.activation != "silu":  # the fused gate/up launch applies SiLU
        return None
    linears = (
        attention.q_proj, attention.k_proj, attention.v_proj, attention.o_proj,
        mlp.gate_proj, mlp.up_proj, mlp.down_proj,
    )
    if any(type(linear) is not nn.Linear for linear in linears):
        return None
    return fused


class DecoderLayer(nn.Module):
    """A pre-norm transformer block: ``h += attn(norm(h)); h += mlp(norm(h))``.

    The residual stream is carried as a pair ``(hidden, residual)`` whose sum is the stream
    (``residual`` ``None``: ``hidden`` alone), so that each add happens inside the next
    norm's kernel.
    """

    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_id)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config.hidden_size, config.intermediate_size, config.activation)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The stream ``hidden + residual`` (both ``[T, hidden]``) in, as a new pair out."""
        fused = fused_kernels_for(hidden, self.self_attn, self.mlp)
        if fused is not None:
            out, residual = self.self_attn.forward_fused(
                fused, hidden, residual, self.input_layernorm, rotary, batch, attn
            )
            return self.mlp.forward_fused(fused, out, residual, self.post_attention_layernorm)
        if residual is None:
            residual, normed = hidden, self.input_layernorm(hidden)
        else:
            normed, residual = self.input_layernorm.add_norm(hidden, residual)
        hidden = self.self_attn(normed, rotary, batch, attn)
        normed, residual = self.post_attention_layernorm.add_norm(hidden, residual)
        return self.mlp(normed), residual


class SandwichDecoderLayer(nn.Module):
    """Gemma 3's block: a norm before and after both attention and MLP,
    ``h += post_attention_norm(attn(input_norm(h)))``, then
    ``h += post_feedforward_norm(mlp(pre_feedforward_norm(h)))``. Carries the residual
    stream as ``DecoderLayer`` does, so that the attention output's add happens inside the
    pre-MLP norm's kernel."""

    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        size, eps = config.hidden_size, config.rms_norm_eps
        self.input_layernorm = RMSNorm(size, eps)
        self.self_attn = Attention(config, layer_id)
        self.post_attention_layernorm = RMSNorm(size, eps)
        self.pre_feedforward_layernorm = RMSNorm(size, eps)
        self.mlp = MLP(size, config.intermediate_size, config.activation)
        self.post_feedforward_layernorm = RMSNorm(size, eps)

    def forward(
        self,
        hidden: torch.Tensor,
        residual: torch.Tensor | None,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The stream ``hidden + residual`` (both ``[T, hidden]``) in, as a new pair out."""
        if residual is None:
            stream, normed = hidden, self.input_layernorm(hidden)
        else:
            normed, stream = self.input_layernorm.add_norm(hidden, residual)
        out = self.post_attention_layernorm(self.self_attn(normed, rotary, batch, attn))
        normed, stream = self.pre_feedforward_layernorm.add_norm(out, stream)
        return self.post_feedforward_layernorm(self.mlp(normed)), stream
