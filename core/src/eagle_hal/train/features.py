"""The target's features of every training token, computed once and kept on the device.

EAGLE-1 regresses the target's final normed hidden state, and its soft labels are the
target's distribution ``softmax(lm_head(feature))``. Storing the features (``H`` numbers a
token) rather than distributions (``V``) keeps the whole data set on the device; the labels
are recomputed from them batch by batch. Features come from the target's own forward with
dense causal attention (``train.dense``), which equals the inference path.
"""

from __future__ import annotations

import sys

import torch

from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset
from eagle_hal.train.dense import target_features

__all__ = ["FeatureStore"]


class FeatureStore:
    """Features ``[total_tokens, H]`` (target dtype, on the target's device), laid out like
    ``DistillDataset.tokens``."""

    def __init__(self, features: torch.Tensor, offsets: torch.Tensor) -> None:
        self.features = features  # [total_tokens, H]
        self.offsets = offsets.to(features.device)  # [n + 1]

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
        batch_tokens: int = 32768,
        progress: bool = True,
    ) -> FeatureStore:
        """Run the target over every sequence, longest first, in padded batches of about
        ``batch_tokens`` tokens."""
        from tqdm import tqdm

        device = target.device
        store = torch.empty(
            dataset.num_tokens, target.config.hidden_size, dtype=target.dtype, device=device
        )
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
            hidden = target_features(target, rows.tokens)  # [B, L, H]
            for row, index in enumerate(chunk.tolist()):
                begin, end = int(dataset.offsets[index]), int(dataset.offsets[index + 1])
                store[begin:end] = hidden[row, : end - begin]
            bar.update(int(lengths[chunk].sum()))
            start += count
        bar.close()
        return cls(store, dataset.offsets)

    def rows(self, indices: torch.Tensor, width: int) -> torch.Tensor:
        """Features of sequences ``indices`` ``[B]`` right-padded to ``width``: ``[B, width, H]``
        (padding repeats the sequence's last feature; the loss ignores it)."""
        indices = indices.to(self.device)
        begin, end = self.offsets[indices], self.offsets[indices + 1]  # [B]
        columns = torch.arange(width, device=self.device)[None, :]  # [1, width]
        gather = torch.minimum(begin[:, None] + columns, end[:, None] - 1)  # [B, width]
        return self.features[gather]

    def rms(self, indices: torch.Tensor | None = None) -> float:
        """Root mean square of the feature values (of sequences ``indices``, default all)."""
        if indices is None:
            values = self.features
        else:
            begin, end = self.offsets[:-1].cpu(), self.offsets[1:].cpu()
            take = torch.cat([torch.arange(int(begin[i]), int(end[i])) for i in indices.tolist()])
            values = self.features[take.to(self.device)]
        return float(values.float().pow(2).mean().sqrt())
