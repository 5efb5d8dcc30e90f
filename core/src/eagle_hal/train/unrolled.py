"""The draft head unrolled over its own predictions ("training-time test"), densely.

At inference only the first draft step reads the target's feature; every later step of a
chain reads the head's own previous output. Unrolling trains that situation: step 1 is the
one-step pass of ``train.dense.draft_forward``, and step ``s >= 2`` runs the head again over
the same tokens with the features step ``s - 1`` predicted, attending as an inference chain
does at depth ``s``.

Notation: draft position ``i`` reads token ``x[i + 1]``; ``g_s[i]`` is step ``s``'s output
there, predicting the target's feature ``f[i + 1]`` (hence the distribution of ``x[i + 2]``);
``K_s[i]`` is its key (and value). Step ``s >= 2`` at ``i`` reads ``(x[i + 1], g_{s-1}[i - 1])``
and attends to ``K_1[j]`` for ``j <= o`` with ``o = i - s + 1``, and to ``K_{s'}[o + s' - 1]``
for ``s' = 2 .. s`` (itself last). Positions with ``o < 0`` have no chain: they attend to
themselves only (finite, never counted).

Alignment with inference (``speculative.worker`` module docstring,
``speculative.drafting.draft_chain``):
after the draft extend of an iteration, the draft's KV store holds positions
``0 .. seq_len - 1``, each computed from the target's feature, and the draft state's hidden
is the extend's last output, at draft position ``o = seq_len - 1`` (it read the root token
``x[o + 1]`` with ``f[o]``): that is ``g_1[o]``, whose top token is the depth-1 draft
(a guess of ``x[o + 2]``). ``draft_chain``'s run ``d = depth_index + 1`` (``d = 1 .. S - 1``)
reads the depth-``d`` token (a guess of ``x[o + d + 1]``) with the previous run's hidden
(``g_1[o]`` for ``d = 1``) at position ``seq_len + d - 1 = o + d``, and sees the prefix
``0 .. o`` (``prefix_lens = seq_lens``) plus the scratch slots of runs ``1 .. d``
(``draft_kv_slots = scratch[:, :d + 1]``, itself last); its top token is depth ``d + 1``.
With ``s = d + 1`` and ``i = o + d``: the token is ``x[i + 1]``, the feature ``g_{s-1}[i - 1]``,
the keys ``K_1[0 .. i - s + 1]`` and ``K_{s'}[i - s + s']``, ``s' = 2 .. s``: exactly the
above, with the true token where inference has its draft (the two agree whenever the chain
is still being accepted, the only case in which later draft tokens matter). Unrolling
``S`` steps covers a chain of ``S`` draft tokens; every path of a draft tree sees the same.
``tests/core/train/test_unrolled.py`` checks this against the engine's own paged draft.

Gradients flow through the fed-back features ``g_{s-1}``: a later step's loss also teaches
the earlier step to produce features the head can continue from, which is what a chain
needs (detaching would train each step as if its input were given).
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F

from eagle_hal.hal.attention import ForwardBatch, ForwardMode
from eagle_hal.model.eagle import EagleDraftModel
from eagle_hal.train.dense import DenseCausalAttention, DenseMetadata, dense_batch

__all__ = ["DenseUnrolledAttention", "UnrolledMetadata", "unrolled_draft_forward", "unrolled_mask"]


@dataclasses.dataclass
class UnrolledMetadata(DenseMetadata):
    """One unroll step's rectangle: which step it is and what its queries see."""

    step: int  # 1-based
    mask: torch.Tensor | None  # [L, step * L] bool, keys in step order; None at step 1 (causal)


def unrolled_mask(seq_len: int, step: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Which keys query ``i`` of unroll step ``step`` sees: ``[L, step * L]`` bool over the
    keys of steps ``1 .. step`` side by side (see the module docstring)."""
    query = torch.arange(seq_len, device=device)[:, None]  # [L, 1]
    key = torch.arange(seq_len, device=device)[None, :]  # [1, L]
    origin = query - (step - 1)  # the chain's origin o = i - s + 1
    blocks = [key <= origin]  # step 1's keys: the real-feature prefix 0 .. o
    blocks += [key == origin + earlier - 1 for earlier in range(2, step + 1)]  # K_s'[o + s' - 1]
    return torch.cat(blocks, dim=1)


class DenseUnrolledAttention(DenseCausalAttention):
    """Dense attention of an unrolled draft head: one instance per unrolled pass.

    Every ``plan`` starts the next unroll step over the same ``[batch, seq_len]`` rectangle;
    ``forward`` keeps each layer's K/V of every step (with their autograd history) and lets
    step ``s`` attend over the K/V of steps ``1 .. s`` under ``unrolled_mask``. Step 1 is
    ``DenseCausalAttention`` unchanged. Differentiable; GQA as in the parent.
    """

    def __init__(self, num_heads: int, num_kv_heads: int, head_dim: int, scaling: float) -> None:
        super().__init__(num_heads, num_kv_heads, head_dim, scaling)
        self._steps = 0
        self._shape: tuple[int, int] | None = None  # (batch, seq_len) of step 1
        # layer -> per step: (keys, values) [B, kv_heads, L, D], rotary applied
        self._kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}

    @property
    def steps(self) -> int:
        """Unroll steps planned so far."""
        return self._steps

    def plan(self, batch: ForwardBatch) -> UnrolledMetadata:
        """Start the next unroll step over ``batch``. Raises ``ValueError`` as
        ``DenseCausalAttention.plan`` does, or when the rectangle differs from step 1's."""
        dense = super().plan(batch)
        shape = (dense.batch_size, dense.seq_len)
        if self._shape is not None and shape != self._shape:
            raise ValueError(
                f"every unroll step runs over step 1's rows {self._shape}, got {shape}: "
                "use a new DenseUnrolledAttention for a new batch"
            )
        self._shape = shape
        self._steps += 1
        mask = None
        if self._steps > 1:
            mask = unrolled_mask(dense.seq_len, self._steps, batch.input_ids.device)
        return UnrolledMetadata(dense.batch_size, dense.seq_len, self._steps, mask)

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Keep ``k``/``v`` ``[B * L, kv_heads, D]`` as this step's K/V of ``layer``, then
        attend with ``q`` ``[B * L, heads, D]``; returns ``[B * L, heads, D]``. Raises
        ``RuntimeError`` when ``layer`` lacks the K/V of an earlier step."""
        meta = self.planned_metadata(batch, UnrolledMetadata)
        kept = self._kv.setdefault(layer, [])
        if len(kept) != meta.step - 1:
            raise RuntimeError(
                f"layer {layer}: unroll step {meta.step} needs the K/V of the {meta.step - 1} "
                f"steps before it, this backend holds {len(kept)}"
            )
        rows, length = meta.batch_size, meta.seq_len
        kept.append(
            (
                k.view(rows, length, self.num_kv_heads, self.head_dim).transpose(1, 2),
                v.view(rows, length, self.num_kv_heads, self.head_dim).transpose(1, 2),
            )
        )
        if meta.step == 1:  # plain causal: bit for bit the one-step pass
            return super().forward(layer, q, k, v, batch)
        keys = torch.cat([key for key, _ in kept], dim=2)  # [B, Hkv, step * L, D]
        values = torch.cat([value for _, value in kept], dim=2)
        group = self.num_heads // self.num_kv_heads
        if group > 1:
            keys, values = keys.repeat_interleave(group, 1), values.repeat_interleave(group, 1)
        q4 = q.view(rows, length, self.num_heads, self.head_dim).transpose(1, 2)  # [B, Hq, L, D]
        out = F.scaled_dot_product_attention(
            q4, keys, values, attn_mask=meta.mask, scale=self.scaling
        )  # [B, Hq, L, D]
        return out.transpose(1, 2).reshape(rows * length, self.num_heads, self.head_dim)


def unrolled_draft_forward(
    head: EagleDraftModel, input_ids: torch.Tensor, hidden: torch.Tensor, steps: int
) -> list[torch.Tensor]:
    """The head unrolled ``steps`` times over rows of tokens ``input_ids`` ``[B, L]``: step 1
    reads the features ``hidden`` ``[B, L, H]`` (as ``draft_forward``), step ``s`` reads step
    ``s - 1``'s output shifted one position right. Returns ``steps`` outputs ``[B, L, H]``
    (before any norm); ``g_s[i]`` for ``i < s - 1`` has no chain and means nothing."""
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    rows, length = input_ids.shape
    attn = DenseUnrolledAttention.for_model(head.config)
    batch = dense_batch(input_ids, ForwardMode.DRAFT_EXTEND)
    outputs: list[torch.Tensor] = []
    features = hidden
    for _ in range(steps):
        batch.attn_metadata = attn.plan(batch)
        out = head.forward(batch, attn, None, features.reshape(rows * length, -1))
        outputs.append(out.view(rows, length, -1))
        # the next step at i reads g_s[i - 1]; position 0 has no chain (zeros, never counted)
        features = F.pad(outputs[-1][:, :-1], (0, 0, 1, 0))
    return outputs
