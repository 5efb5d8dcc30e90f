"""The dense training forward equals the inference forward.

Oracle: the engine's own inference path on the CPU backend (ModelRunner, paged KV, the
reference attention backend), run over ragged requests, some of them in two chunks (a
cached prefix, then the rest). The dense path runs the same rows right-padded to one length
in a single forward. Tolerance: atol 1e-5 in float32.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.engine.runner import CacheConfig, ModelRunner
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.testing.models import tiny_eagle1, tiny_target
from eagle_hal.train.dense import DenseCausalAttention, dense_batch, draft_forward, target_features

ATOL = 1e-5
LENGTHS = [9, 4, 13, 1]
SPLIT = {0: 5, 2: 7}  # row -> tokens in the first chunk (the rest follows with a cached prefix)


def _runner(cpu_backend, target, head):
    cache = CacheConfig(num_tokens=256, page_size=4, max_requests=8, max_context=64)
    return ModelRunner(cpu_backend, target, head, cache, torch.float32)


def _chunks(lengths):
    """Per forward: (row indices, start, end) triples, covering each row in order."""
    first = [(i, 0, SPLIT.get(i, n)) for i, n in enumerate(lengths)]
    second = [(i, SPLIT[i], lengths[i]) for i in sorted(SPLIT)]
    return [first, second]


def _inference(runner, mode, per_row_ids, per_row_hidden=None, aux_layers=()):
    rows = [runner.table.add_request() for _ in per_row_ids]
    for row, ids in zip(rows, per_row_ids, strict=False):
        runner.table.reserve(row, len(ids))
    runner.sync_table()
    outputs = [[] for _ in per_row_ids]
    for chunk in _chunks([len(ids) for ids in per_row_ids]):
        ids = runner.long([t for i, s, e in chunk for t in per_row_ids[i][s:e]])
        batch = runner.causal_batch(
            mode,
            ids,
            [rows[i] for i, _, _ in chunk],
            [s for _, s, _ in chunk],
            [e - s for _, s, e in chunk],
        )
        if per_row_hidden is None:
            target_out = runner.run_target(batch, aux_layers)
            out = torch.cat([*target_out.aux_hidden_states, target_out.hidden_states], dim=-1)
        else:
            hidden = torch.cat([per_row_hidden[i][s:e] for i, s, e in chunk])
            out = runner.run_draft(batch, hidden)
        pieces = out.split([e - s for _, s, e in chunk])
        for (i, _, _), piece in zip(chunk, pieces, strict=False):
            outputs[i].append(piece)
    return [torch.cat(parts) for parts in outputs]


def _padded(per_row_ids, pad=0):
    length = max(len(ids) for ids in per_row_ids)
    return torch.tensor([ids + [pad] * (length - len(ids)) for ids in per_row_ids])


@pytest.fixture(scope="module")
def models():
    target = tiny_target(seed=21, vocab=97, layers=3)
    return target, tiny_eagle1(target, seed=22)


@pytest.fixture(scope="module")
def sequences():
    gen = torch.Generator().manual_seed(5)
    return [torch.randint(0, 97, (n,), generator=gen).tolist() for n in LENGTHS]


def test_target_features_match_inference(cpu_backend, models, sequences):
    """Dense target features equal the paged EXTEND forward's hidden states, row by row."""
    target, head = models
    expected = _inference(_runner(cpu_backend, target, head), ForwardMode.EXTEND, sequences)
    with torch.no_grad():
        dense = target_features(target, _padded(sequences))  # [B, L, H]
    for row, ids in enumerate(sequences):
        torch.testing.assert_close(dense[row, : len(ids)], expected[row], atol=ATOL, rtol=0)


def test_target_streams_match_inference(cpu_backend, models, sequences):
    """With aux layers (any order, the embeddings and the last layer's output included),
    the dense features are the paged EXTEND forward's streams entering those layers, then
    its final hidden states, side by side (EAGLE-3's FeatureStore rows)."""
    target, head = models
    aux = (3, 0, 2)
    expected = _inference(
        _runner(cpu_backend, target, head), ForwardMode.EXTEND, sequences, aux_layers=aux
    )
    with torch.no_grad():
        dense = target_features(target, _padded(sequences), aux)  # [B, L, 4H]
    assert dense.shape[-1] == 4 * 32
    for row, ids in enumerate(sequences):
        for block in range(4):
            # (the un-normed residual streams of this random target reach ~130, where the
            # GEMMs' summation orders differ by ~1e-4: a tolerance relative to each stream)
            got = dense[row, : len(ids), 32 * block : 32 * (block + 1)]
            want = expected[row][:, 32 * block : 32 * (block + 1)]
            scale = float(want.abs().max().clamp(min=1.0))
            torch.testing.assert_close(got, want, atol=ATOL * scale, rtol=1e-5)


def test_draft_forward_matches_inference(cpu_backend, models, sequences):
    """The dense draft forward equals DRAFT_EXTEND through the paged cache, and its
    gradient flows to the head's parameters."""
    target, head = models
    gen = torch.Generator().manual_seed(6)
    hidden = [torch.randn(len(ids), 32, generator=gen) for ids in sequences]
    expected = _inference(
        _runner(cpu_backend, target, head), ForwardMode.DRAFT_EXTEND, sequences, hidden
    )
    length = max(LENGTHS)
    padded_hidden = torch.stack([torch.cat([h, torch.zeros(length - len(h), 32)]) for h in hidden])
    dense = draft_forward(head, _padded(sequences), padded_hidden)
    for row, ids in enumerate(sequences):
        # (rtol: the CPU backend's inference GEMMs sum in another order than F.linear;
        # outputs reach ~10, where float32 rounding alone differs by ~1e-6)
        torch.testing.assert_close(
            dense[row, : len(ids)], expected[row].detach(), atol=ATOL, rtol=1e-5
        )
    dense[0, : LENGTHS[0]].sum().backward()
    assert head.fc.weight.grad is not None and head.fc.weight.grad.abs().sum() > 0
    head.zero_grad(set_to_none=True)


def test_dense_attention_rejects_ragged_and_tree_batches():
    """A batch with a cached prefix or unequal rows is refused with a clear error."""
    attn = DenseCausalAttention(4, 2, 8, 8**-0.5)
    batch = dense_batch(torch.zeros(2, 3, dtype=torch.int64))
    batch.extend_lens_cpu = (3, 2)
    with pytest.raises(ValueError, match="equal length"):
        attn.plan(batch)
    batch = dense_batch(torch.zeros(2, 3, dtype=torch.int64))
    batch.prefix_lens_cpu = (1, 0)
    with pytest.raises(ValueError, match="prefix"):
        attn.plan(batch)
    batch = dense_batch(torch.zeros(2, 3, dtype=torch.int64), ForwardMode.TARGET_VERIFY)
    with pytest.raises(ValueError, match="causal"):
        attn.plan(batch)
