"""FeatureStore.rms against a brute-force float64 oracle: the chunked, masked sum must give
the RMS of exactly the chosen sequences' tokens, whatever the chunk boundaries."""

from __future__ import annotations

import math

import pytest
import torch
from eagle_hal.train.features import FeatureStore


def _store(lengths: list[int], width: int, seed: int = 0) -> FeatureStore:
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    # sequences of very different scale, so taking the wrong tokens moves the RMS a lot
    scales = torch.repeat_interleave(torch.arange(1, len(lengths) + 1.0) ** 2,
                                     torch.tensor(lengths))
    values = torch.randn(int(offsets[-1]), width, generator=generator) * scales[:, None]
    return FeatureStore(values.to(torch.bfloat16), offsets)


def _oracle(store: FeatureStore, indices: list[int] | None) -> float:
    n = len(store.offsets) - 1
    chosen = range(n) if indices is None else indices
    total, count = 0.0, 0
    for i in chosen:
        rows = store.features[int(store.offsets[i]) : int(store.offsets[i + 1])].double()
        total += float(rows.pow(2).sum())
        count += rows.numel()
    return math.sqrt(total / count)


@pytest.mark.parametrize("chunk_tokens", [1, 3, 7, 1 << 20])
@pytest.mark.parametrize("indices", [None, [0], [4, 1], [2, 3, 5], [5]])
def test_rms_of_chosen_sequences_matches_brute_force(chunk_tokens, indices):
    store = _store([5, 1, 9, 4, 2, 6], width=3)
    chosen = None if indices is None else torch.tensor(indices)
    got = store.rms(chosen, chunk_tokens=chunk_tokens)
    assert got == pytest.approx(_oracle(store, indices), rel=1e-6)  # float32 within a chunk


def test_rms_of_a_subset_differs_from_the_whole():
    """The oracle check above would pass for a store that ignored ``indices`` only if the
    subsets' RMS equalled the whole's; here they differ by far more than the tolerance (1e-6)."""
    store = _store([5, 1, 9, 4, 2, 6], width=3)
    assert store.rms(torch.tensor([0])) < 0.5 * store.rms()
