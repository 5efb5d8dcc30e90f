"""The target's features of every training token, computed once and kept on the device.

EAGLE-1 regresses the target's final normed hidden state, and its soft labels are the
target's distribution ``softmax(lm_head(feature))``. Storing the features rather than
distributions (``V`` numbers a token) keeps the whole data set on the device; the labels
are recomputed from them batch by batch. Features come from the target's own forward with
dense causal attention (``train.dense``), which equals the inference path.

What one token costs, in the target's dtype (``H`` = the target's hidden size):

* EAGLE-1: ``H`` numbers, the final normed hidden state (feature and labels at once);
* EAGLE-3: ``4H``, the residual streams entering its 3 feature layers (``3H``, what its
  ``fc`` reads) then the final normed state (``H``, for the labels only).

For SmolLM2-135M (``H = 576``) in bf16 that is 1,152 against 4,608 bytes a token: 22.5 GiB
against 90 GiB for a data set of 21 M tokens.
"""

from __future__ import annotations

import math
import sys

import torch

from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset
from eagle_hal.train.dense import target_features

__all__ = ["FeatureStore"]


class FeatureStore:
    """Features ``[total_tokens, W]`` (target dtype, on the target's device), laid out like
    ``DistillDataset.tokens``: ``W = H`` (the final normed state) without aux layers,
    ``W = (k + 1) * H`` with ``k`` of them (their residual streams, then the final state)."""

    def __init__(
        self, features: torch.Tensor, offsets: torch.Tensor, aux_layers: tuple[int, ...] = ()
    ) -> None:
        self.features = features  # [total_tokens, W]
        self.offsets = offsets.to(features.device)  # [n + 1]
        self.aux_layers = aux_layers  # target layers whose input streams come first

    @property
    def device(self) -> torch.device:
        return self.features.device

    @classmethod
    @torch.no_grad()
    def compute(
        cls,
        target: LlamaForCausalLM,
        dataset: DistillDataset,
        *,
        aux_layers: tuple[int, ...] = (),
        batch_tokens: int = 32768,
        progress: bool = True,
    ) -> FeatureStore:
        """Run the target over every sequence, longest first, in padded batches of about
        ``batch_tokens`` tokens, keeping the residual streams entering ``aux_layers`` (HF
        ``hidden_states`` indices) before each token's final normed state."""
        from tqdm import tqdm

        device = target.device
        per_token = (len(aux_layers) + 1) * target.config.hidden_size  # W
        store = torch.empty(dataset.num_tokens, per_token, dtype=target.dtype, device=device)
        lengths = dataset.lengths
        order = torch.argsort(lengths, descending=True)
        bar = tqdm(
            total=dataset.num_tokens,
            desc="target features",
            unit=" tokens",
            unit_scale=True,
            disable=not progress,
            file=sys.stderr,
            dynamic_ncols=True,
        )
        start = 0
        while start < len(order):
            width = int(lengths[order[start]])
            count = max(1, batch_tokens // width)
            chunk = order[start : start + count]
            rows = dataset.padded(chunk, device)
            hidden = target_features(target, rows.tokens, aux_layers)  # [B, L, W]
            for row, index in enumerate(chunk.tolist()):
                begin, end = int(dataset.offsets[index]), int(dataset.offsets[index + 1])
                store[begin:end] = hidden[row, : end - begin]
            bar.update(int(lengths[chunk].sum()))
            start += count
        bar.close()
        return cls(store, dataset.offsets, aux_layers)

    def rows(self, indices: torch.Tensor, width: int) -> torch.Tensor:
        """Features of sequences ``indices`` ``[B]`` right-padded to ``width``: ``[B, width, W]``
        (padding repeats the sequence's last feature; the loss ignores it)."""
        indices = indices.to(self.device)
        begin, end = self.offsets[indices], self.offsets[indices + 1]  # [B]
        columns = torch.arange(width, device=self.device)[None, :]  # [1, width]
        gather = torch.minimum(begin[:, None] + columns, end[:, None] - 1)  # [B, width]
        return self.features[gather]

    def rms(self, indices: torch.Tensor | None = None, *, chunk_tokens: int = 1 << 20) -> float:
        """Root mean square of the stored values (of sequences ``indices``, default all).

        Summed over chunks of ``chunk_tokens`` tokens (float32 within a chunk, a Python
        float across them: not every accelerator has float64): a float copy of the whole
        store (or of a gathered subset) would take twice the store's memory again, which
        an 80 GB card holding 15 M tokens of features does not have."""
        total = self.features.shape[0]
        keep = None
        if indices is not None:  # tokens of the chosen sequences: +1 at a start, -1 past an end
            marks = torch.zeros(total + 1, dtype=torch.int32, device=self.device)
            indices = indices.to(self.device)
            ones = torch.ones_like(indices, dtype=torch.int32)
            marks.index_add_(0, self.offsets[indices], ones)
            marks.index_add_(0, self.offsets[indices + 1], -ones)
            keep = marks.cumsum(0)[:total] > 0  # [total_tokens]
        squares, count = 0.0, 0
        for start in range(0, total, chunk_tokens):
            values = self.features[start : start + chunk_tokens].float().pow(2).sum(-1)
            if keep is not None:
                part = keep[start : start + chunk_tokens]
                values, count = values[part], count + int(part.sum())
            else:
                count += values.shape[0]
            squares += float(values.sum())
        width = self.features.shape[-1]
        return math.sqrt(squares / max(1, count * width))
