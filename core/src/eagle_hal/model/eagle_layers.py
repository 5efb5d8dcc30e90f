"""The decoder layers of EAGLE draft heads (``eagle_hal.model.eagle`` assembles them).

A head's first layer reads an input its strategy builds from the token embedding and the
feature (EAGLE-1: ``fc``'s output, with no input norm; EAGLE-3: its two normed halves). An
EAGLE-1 head may stack more layers after it (``num_hidden_layers > 1`` in its config, as
the published EAGLE-1 code builds them): those are plain pre-norm Llama layers with an
``input_layernorm``. Layer ``i`` keeps its K/V in layer ``i`` of the draft's KV store.
"""

from __future__ import annotations

import torch
from torch import nn

from eagle_hal.hal.attention import AttentionBackend, ForwardBatch
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.layers import MLP, Attention, RMSNorm, fused_kernels_for

__all__ = ["DraftLayer", "Eagle3Layer", "StackedDraftLayer"]


class DraftLayer(nn.Module):
    """Attention + MLP of a draft layer; the caller supplies the attention input (normed
    first by ``input_norm`` if given) and the residual it is added to."""

    def __init__(self, config: ModelConfig, attention_input_size: int, layer_id: int = 0) -> None:
        super().__init__()
        self.self_attn = Attention(config, layer_id, input_size=attention_input_size)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.mlp = MLP(config.hidden_size, config.intermediate_size)

    def forward(
        self,
        attention_input: torch.Tensor,
        residual: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
        input_norm: RMSNorm | None = None,
    ) -> torch.Tensor:
        fused = fused_kernels_for(attention_input, self.self_attn, self.mlp)
        if fused is not None:  # input_norm inside the fused QKV launch
            attention_out, _ = self.self_attn.forward_fused(
                fused, attention_input, None, input_norm, rotary, batch, attn
            )
            # (attention_out + residual) + mlp(norm(attention_out + residual))
            out, _ = self.mlp.forward_fused(
                fused, attention_out, residual, self.post_attention_layernorm, add_stream=True
            )
            return out
        if input_norm is not None:
            attention_input = input_norm(attention_input)
        attention_out = self.self_attn(attention_input, rotary, batch, attn)
        normed, hidden = self.post_attention_layernorm.add_norm(attention_out, residual)
        return hidden + self.mlp(normed)


class StackedDraftLayer(DraftLayer):
    """An EAGLE-1 head's layer after its first: ``h + attn(input_layernorm(h))``, then the
    MLP block, as a Llama decoder layer."""

    def __init__(self, config: ModelConfig, layer_id: int) -> None:
        super().__init__(config, config.hidden_size, layer_id)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def run(
        self,
        hidden: torch.Tensor,
        rotary: tuple[torch.Tensor, torch.Tensor],
        batch: ForwardBatch,
        attn: AttentionBackend,
    ) -> torch.Tensor:
        """The layer's output ``[T, H]`` from the previous layer's ``hidden`` ``[T, H]``."""
        return self(hidden, hidden, rotary, batch, attn, self.input_layernorm)


class Eagle3Layer(DraftLayer):
    """EAGLE-3's one layer: attention over ``[embedding | feature]`` (2H wide)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__(config, attention_input_size=2 * config.hidden_size)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.hidden_norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
