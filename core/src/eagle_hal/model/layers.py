"""The blocks every Llama-family model and EAGLE head is built from.

RMSNorm, rotary position embedding (with linear, llama3 and explicit-factor scaling), the
SwiGLU MLP and the attention block. The attention block owns the Q/K/V/O projections and
the rotary rotation; the attention itself (KV write, paged gather, masking) is the
``AttentionBackend``'s, called once per layer as ``attn.forward(layer_id, q, k, v, batch)``.

Numerics follow Hugging Face transformers' Llama: RMSNorm and rotary angles in float32,
cast back to the activation dtype before the weight multiply / rotation.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from eagle_hal.hal.attention import AttentionBackend, ForwardBatch
from eagle_hal.model.config import ModelConfig, RopeScaling, RopeScalingKind

__all__ = ["Attention", "DecoderLayer", "MLP", "RMSNorm", "RotaryEmbedding", "apply_rotary"]


class RMSNorm(nn.Module):
    """``x / rms(x) * weight``, normalised in float32."""

    def __init__(self, hidden_size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden_size))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


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
    stay float32 on the device they were built for, whatever dtype the model is cast to."""

    def __init__(self, config: ModelConfig, device: torch.device | str) -> None:
        self.inv_freq = _inverse_frequencies(
            config.head_dim, config.rope_theta, config.rope_scaling
        ).to(device)  # [head_dim // 2]

    def cos_sin(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``cos``/``sin`` ``[T, head_dim]`` for ``positions`` ``[T]``; once per forward."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]  # [T, head_dim // 2]
        angles = torch.cat([angles, angles], dim=-1)  # [T, head_dim]
        return angles.cos().to(dtype), angles.sin().to(dtype)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` ``[T, heads, head_dim]`` (half-split pairing, as HF Llama)."""
    return x * cos[:, None, :] + _rotate_half(x) * sin[:, None, :]


class MLP(nn.Module):
    """SwiGLU: ``down(silu(gate(x)) * up(x))``."""

    def __init__(self, hidden_size: int, intermediate_size: int) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
        self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Attention(nn.Module):
    """Q/K/V projections, rotary, the backend's attention for layer ``layer_id``, O projection.

    ``input_size`` defaults to the hidden size; EAGLE-3's draft layer reads ``2 * hidden``.
    """

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

    def forward(
        self,
        x: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        """``x`` ``[T, input_size]`` -> ``[T, hidden]``; writes this layer's K/V (via ``attn``)."""
        num_tokens = x.shape[0]
        cos, sin = rotary
        q = self.q_proj(x).view(num_tokens, self.num_heads, self.head_dim)
        k = self.k_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)
        v = self.v_proj(x).view(num_tokens, self.num_kv_heads, self.head_dim)
        q, k = apply_rotary(q, cos, sin), apply_rotary(k, cos, sin)
        out = attn.forward(self.layer_id, q, k, v, batch)  # [T, num_heads, head_dim]
        return self.o_proj(out.reshape(num_tokens, self.num_heads * self.head_dim))


class DecoderLayer(nn.Module):
    """A pre-norm transformer block: ``h += attn(norm(h)); h += mlp(norm(h))``."""

    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.self_attn = Attention(config, layer_id)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config.hidden_size, config.intermediate_size)

    def forward(
        self,
        hidden: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        hidden = hidden + self.self_attn(self.input_layernorm(hidden), rotary, batch, attn)
        return hidden + self.mlp(self.post_attention_layernorm(hidden))
