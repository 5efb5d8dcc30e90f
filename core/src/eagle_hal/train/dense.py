"""Dense causal attention for training: whole padded sequences at once, no KV cache.

Training runs the target (for features) and the draft head (with gradients) over complete
sequences. Rather than a second copy of each model's forward, the models' own ``forward``
runs with ``DenseCausalAttention`` in place of a paged backend: the same projections, rotary
and MLP code as inference, only the attention differs (one ``scaled_dot_product_attention``
over a rectangular ``[batch, seq_len]`` block, causal, nothing written anywhere).

Sequences are right-padded to a common length: under a causal mask a padded tail never
influences the real positions before it, so padding needs no mask of its own; the caller
ignores the outputs at padded positions.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from eagle_hal.hal.attention import AttentionBackend, AttentionMetadata, ForwardBatch, ForwardMode
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.eagle import EagleDraftModel
from eagle_hal.model.llama import LlamaForCausalLM

__all__ = [
    "DenseCausalAttention",
    "DenseMetadata",
    "dense_batch",
    "draft_forward",
    "target_features",
]


@dataclasses.dataclass
class DenseMetadata(AttentionMetadata):
    """The rectangle a dense forward covers."""

    batch_size: int
    seq_len: int


class DenseCausalAttention(AttentionBackend):
    """Causal self-attention over ``[batch, seq_len]`` rows of new tokens, no KV store.

    Accepts causal modes (EXTEND, DRAFT_EXTEND) with no cached prefix and the same number
    of tokens in every row (see ``dense_batch``). Differentiable: used with autograd for
    the draft head and under ``torch.no_grad`` for the target.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scaling: float) -> None:
        # No AttentionConfig: there is no KV store or request table to describe.
        if num_heads % num_kv_heads:
            raise ValueError(
                f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads})"
            )
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, num_kv_heads, head_dim
        self.scaling = scaling

    @classmethod
    def for_model(cls, config: ModelConfig) -> DenseCausalAttention:
        """The dense attention of a model (target or draft head) with this geometry."""
        return cls(config.num_heads, config.num_kv_heads, config.head_dim, config.head_dim**-0.5)

    def plan(self, batch: ForwardBatch) -> DenseMetadata:
        """Check that ``batch`` is a rectangle of fresh causal rows. Raises ``ValueError``
        for tree or draft-decode modes, a cached prefix, or rows of unequal length."""
        if not batch.mode.is_causal_extend:
            raise ValueError(f"dense training attention runs causal modes only, not {batch.mode}")
        if any(batch.prefix_lens_cpu):
            raise ValueError("dense training attention has no KV cache: prefix_lens must be 0")
        lengths = set(batch.extend_lens_cpu)
        if len(lengths) != 1:
            raise ValueError("dense training attention needs rows of equal length (right-pad them)")
        return DenseMetadata(batch_size=batch.batch_size, seq_len=lengths.pop())

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Causal attention of ``q`` ``[B * L, heads, D]`` over ``k``/``v`` ``[B * L,
        kv_heads, D]`` within each row; ``layer`` is unused (nothing is stored). Returns
        ``[B * L, heads, D]``."""
        meta = batch.attn_metadata
        if not isinstance(meta, DenseMetadata):
            meta = self.plan(batch)
        rows, length = meta.batch_size, meta.seq_len
        group = self.num_heads // self.num_kv_heads
        q4 = q.view(rows, length, self.num_heads, self.head_dim).transpose(1, 2)  # [B, Hq, L, D]
        k4 = k.view(rows, length, self.num_kv_heads, self.head_dim).transpose(
            1, 2
        )  # [B, Hkv, L, D]
        v4 = v.view(rows, length, self.num_kv_heads, self.head_dim).transpose(1, 2)
        if group > 1:
            k4, v4 = k4.repeat_interleave(group, dim=1), v4.repeat_interleave(group, dim=1)
        out = F.scaled_dot_product_attention(q4, k4, v4, is_causal=True, scale=self.scaling)
        return out.transpose(1, 2).reshape(rows * length, self.num_heads, self.head_dim)


def dense_batch(input_ids: torch.Tensor, mode: ForwardMode = ForwardMode.EXTEND) -> ForwardBatch:
    """A ``ForwardBatch`` over right-padded rows ``input_ids`` ``[B, L]``: positions
    ``0 .. L-1`` in every row, no prefix. Its slot fields are placeholders (nothing is
    cached)."""
    rows, length = input_ids.shape
    device = input_ids.device
    positions = torch.arange(length, device=device).repeat(rows)  # [B * L]
    return ForwardBatch(
        mode=mode,
        input_ids=input_ids.reshape(-1),
        positions=positions,
        table_rows=torch.arange(rows, device=device),
        prefix_lens=torch.zeros(rows, dtype=torch.int64, device=device),
        extend_lens=torch.full((rows,), length, dtype=torch.int64, device=device),
        out_cache_loc=torch.zeros(rows * length, dtype=torch.int64, device=device),
        prefix_lens_cpu=(0,) * rows,
        extend_lens_cpu=(length,) * rows,
    )


def target_features(
    target: LlamaForCausalLM, tokens: torch.Tensor, aux_layers: tuple[int, ...] = ()
) -> torch.Tensor:
    """The target's features of right-padded rows ``tokens`` ``[B, L]``, computed by the
    target's own forward with dense attention: the final normed hidden state ``[B, L, H]``
    (EAGLE-1's feature), or with ``aux_layers`` the residual streams entering those layers
    (as ``LlamaForCausalLM.forward`` returns them) followed by the final normed state,
    concatenated ``[B, L, (len(aux_layers) + 1) * H]`` (EAGLE-3's features and its labels).
    Call under ``torch.no_grad``/``inference_mode``; padded positions hold garbage."""
    rows, length = tokens.shape
    attn = DenseCausalAttention.for_model(target.config)
    out = target.forward(dense_batch(tokens), attn, aux_layers=aux_layers)
    if not aux_layers:
        return out.hidden_states.view(rows, length, -1)
    streams = torch.cat([*out.aux_hidden_states, out.hidden_states], dim=-1)  # [B * L, (k+1)H]
    return streams.view(rows, length, -1)


def draft_forward(
    head: EagleDraftModel, input_ids: torch.Tensor, hidden: torch.Tensor
) -> torch.Tensor:
    """The head's layer output ``[B, L, H]`` (before any norm) over rows of tokens
    ``input_ids`` ``[B, L]`` and input features ``hidden`` ``[B, L, H]``; position ``i`` reads
    token ``i`` with feature ``i``, exactly as DRAFT_EXTEND does at inference."""
    rows, length = input_ids.shape
    attn = DenseCausalAttention.for_model(head.config)
    batch = dense_batch(input_ids, ForwardMode.DRAFT_EXTEND)
    out = head.forward(batch, attn, None, hidden.reshape(rows * length, -1))
    return out.view(rows, length, -1)
