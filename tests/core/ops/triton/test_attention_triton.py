"""TritonAttentionBackend against TorchAttentionBackend (the pure-torch statement of the
contract, itself checked against a float64 oracle) in every forward mode; and the
backend's warm-up lengths against a brute-force search over the split counts.

Both backends run over identical copies of a KV store whose slots are shuffled, so a
request's prefix is scattered; prefixes are ragged, include 0 and exceed one key block.
Kernels run interpreted on CPU (TRITON_INTERPRET=1, set by conftest) or on the device.
"""

from __future__ import annotations

import math

import pytest
import torch
from eagle_hal.engine.kv_cache import KVStorage
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.attention_reference import TorchAttentionBackend

triton_attention = pytest.importorskip("eagle_hal.ops.triton.attention")

from eagle_hal.ops.triton import attention_split as kernels  # noqa: E402

NUM_SLOTS, MAX_REQUESTS, MAX_CONTEXT = 512, 6, 128
TOLERANCE = {torch.float32: 1e-5, torch.float16: 2e-3}


def device() -> torch.device:
    if torch.accelerator.is_available():
        return torch.accelerator.current_accelerator()
    return torch.device("cpu")


class Pair:
    """Reference and Triton backends over identical random KV stores and one table."""

    def __init__(self, *, order="NHD", heads=4, kv_heads=2, head_dim=8,
                 dtype=torch.float32, seed=0) -> None:
        self.gen = torch.Generator().manual_seed(seed)
        self.dev, self.dtype = device(), dtype
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, head_dim
        layout = KVLayout(order=order)
        stores = [KVStorage(num_layers=1, num_slots=NUM_SLOTS, num_kv_heads=kv_heads,
                            head_dim=head_dim, layout=layout, dtype=dtype, device=self.dev)
                  for _ in range(2)]
        for store in stores:
            torch.manual_seed(seed)
            store.k_buffer(0).copy_(torch.randn(store.k_buffer(0).shape).to(dtype))
            store.v_buffer(0).copy_(torch.randn(store.v_buffer(0).shape).to(dtype))
        # every table position gets a distinct, shuffled slot (slot 0 is left unused)
        slots = torch.randperm(NUM_SLOTS - 1, generator=self.gen)[: MAX_REQUESTS * 80] + 1
        table = torch.zeros(MAX_REQUESTS, MAX_CONTEXT, dtype=torch.int64)
        table[:, :80] = slots.view(MAX_REQUESTS, 80)
        self.table = table.to(self.dev)
        scaling = 1 / math.sqrt(head_dim)
        configs = [AttentionConfig(heads, kv_heads, head_dim, 1, scaling, s, self.table)
                   for s in stores]
        self.reference = TorchAttentionBackend(configs[0])
        self.triton = triton_attention.TritonAttentionBackend(configs[1])

    def randn(self, *shape):
        return torch.randn(*shape, generator=self.gen).to(self.dev, self.dtype)

    def compare(self, batch_args: dict, tokens: int) -> None:
        q = self.randn(tokens, self.heads, self.head_dim)
        k = self.randn(tokens, self.kv_heads, self.head_dim)
        v = self.randn(tokens, self.kv_heads, self.head_dim)
        outs = []
        for backend in (self.reference, self.triton):
            batch = ForwardBatch(**batch_args)
            batch.attn_metadata = backend.plan(batch)
            outs.append(backend.forward(0, q, k, v, batch).float())
        tol = TOLERANCE[self.dtype]
        torch.testing.assert_close(outs[1], outs[0], atol=tol, rtol=tol)

    def long(self, values) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.dev)


def causal_args(pair: Pair, mode, rows, prefix, extend) -> dict:
    """New tokens at table positions prefix .. prefix + extend of each row."""
    positions = [p + i for p, n in zip(prefix, extend, strict=False) for i in range(n)]
    row_of_token = [r for r, n in zip(rows, extend, strict=False) for _ in range(n)]
    out_cache_loc = pair.table[pair.long(row_of_token), pair.long(positions)]
    return dict(mode=mode, input_ids=pair.long([0] * len(positions)),
                positions=pair.long(positions), table_rows=pair.long(rows),
                prefix_lens=pair.long(prefix), extend_lens=pair.long(extend),
                out_cache_loc=out_cache_loc, prefix_lens_cpu=tuple(prefix),
                extend_lens_cpu=tuple(extend))


@pytest.mark.parametrize("order", ["NHD", "HND"])
@pytest.mark.parametrize("mode", [ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND])
def test_ragged_extend(order, mode):
    """Ragged causal extends, with and without a cached prefix."""
    pair = Pair(order=order)
    rows, prefix, extend = [3, 0, 5], [0, 37, 5], [9, 3, 1]
    pair.compare(causal_args(pair, mode, rows, prefix, extend), sum(extend))


@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 2, 8), (3, 3, 12), (6, 1, 16)])
def test_decode(heads, kv_heads, head_dim):
    """One token per request over prefixes 0 .. beyond one key block; GQA and odd head dims."""
    pair = Pair(heads=heads, kv_heads=kv_heads, head_dim=head_dim, seed=1)
    rows, prefix = [1, 2, 4, 0], [0, 1, 65, 79]
    pair.compare(causal_args(pair, ForwardMode.DECODE, rows, prefix, [1] * 4), 4)


def test_decode_half_precision():
    """float16 storage and activations, float32 accumulation."""
    pair = Pair(dtype=torch.float16, seed=2)
    rows, prefix = [1, 2], [40, 7]
    pair.compare(causal_args(pair, ForwardMode.DECODE, rows, prefix, [1, 1]), 2)


def test_decode_batch_of_one_splits_the_keys():
    """Batch-1 decode is planned with several key splits, merged by log-sum-exp."""
    pair = Pair(seed=5)
    args = causal_args(pair, ForwardMode.DECODE, [4], [79], [1])
    assert pair.triton.plan(ForwardBatch(**args)).num_splits > 1
    pair.compare(args, 1)


def test_metadata_planned_before_the_split_scratch_grew_still_serves():
    """Split scratch is shared across shapes and grows for larger ones; a shape planned
    (and cached) before the growth still attends correctly afterwards."""
    pair = Pair(seed=6)
    small = causal_args(pair, ForwardMode.DECODE, [4], [79], [1])
    pair.compare(small, 1)
    large = causal_args(pair, ForwardMode.DECODE, [0, 1, 2], [30, 50, 70], [1, 1, 1])
    assert pair.triton.plan(ForwardBatch(**large)).num_splits > 1
    pair.compare(large, 3)
    pair.compare(causal_args(pair, ForwardMode.DECODE, [5], [60], [1]), 1)


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_target_verify_tree_mask(order):
    """N tree tokens per request under random ancestor masks (tree_block layout)."""
    pair = Pair(order=order, seed=3)
    rows, prefix, n = [2, 4, 1], [12, 0, 45], 5
    args = causal_args(pair, ForwardMode.TARGET_VERIFY, rows, prefix, [n] * 3)
    # random trees: parent of node j is a random earlier node; visibility = ancestors + self
    mask = torch.zeros(3, n, n, dtype=torch.bool)
    for b in range(3):
        parents = [0] + [int(torch.randint(0, j, (1,), generator=pair.gen)) for j in range(1, n)]
        for j in range(n):
            node = j
            mask[b, j, node] = True
            while node:
                node = parents[node]
                mask[b, j, node] = True
    args["tree_mask"] = mask.to(pair.dev)
    pair.compare(args, 3 * n)


@pytest.mark.parametrize("depth", [1, 3])
def test_draft_decode_branches(depth):
    """K branches per request, each over the prefix plus its own ancestor slots."""
    pair = Pair(seed=4)
    rows, prefix, branches = [0, 3], [20, 6], 3
    tokens = 2 * branches
    # scratch slots past each prefix, shuffled; every branch row gets distinct slots, so no
    # two tokens write one slot (duplicate writes have no defined winner on a GPU)
    scratch = [pair.table[r, p : p + branches * depth] for r, p in zip(rows, prefix, strict=False)]
    kv_slots = torch.cat([
        s[torch.randperm(branches * depth, generator=pair.gen).to(s.device)].view(branches, depth)
        for s in scratch
    ])  # [B * K, depth]
    args = dict(mode=ForwardMode.DRAFT_DECODE, input_ids=pair.long([0] * tokens),
                positions=pair.long([0] * tokens), table_rows=pair.long(rows),
                prefix_lens=pair.long(prefix), extend_lens=pair.long([branches] * 2),
                out_cache_loc=kv_slots[:, -1].contiguous(), prefix_lens_cpu=tuple(prefix),
                extend_lens_cpu=(branches,) * 2, draft_kv_slots=kv_slots,
                num_branches=branches)
    pair.compare(args, tokens)


def test_an_extend_captured_once_replays_with_ragged_lengths():
    """An EXTEND captured as 3 requests of 12 tokens in all (all in the first) replays
    with lengths 5, 4, 3, then with the captured ones again: each time the captured
    tensors hold what a fresh plan of the replayed batch holds (``ragged_extend_graphs``).
    Another total, or a decode's shape change, is refused; a captured extend of a uniform
    shape gets metadata of its own, not the eager plans' cached one (a ragged replay
    rewrites it)."""
    pair = Pair()

    def extend(lens):
        return ForwardBatch(**causal_args(pair, ForwardMode.EXTEND, [0, 1, 2], [0, 0, 0], lens))

    metadata = pair.triton.plan_for_capture(extend([12, 0, 0]))
    for lens in ([5, 4, 3], [12, 0, 0], [1, 1, 10]):
        pair.triton.plan_for_replay(extend(lens), metadata)
        fresh = pair.triton.plan(extend(lens))
        for field in ("token_request", "own_base", "own_len"):
            assert torch.equal(getattr(metadata, field), getattr(fresh, field)), (lens, field)
        if lens == [5, 4, 3]:
            assert metadata.own_len.tolist() == [1, 2, 3, 4, 5, 1, 2, 3, 4, 1, 2, 3]
    with pytest.raises(ValueError, match="differs from the captured"):
        pair.triton.plan_for_replay(extend([5, 4, 2]), metadata)
    uniform = pair.triton.plan_for_capture(extend([4, 4, 4]))
    assert uniform is not pair.triton.plan(extend([4, 4, 4]))
    assert all(uniform is not cached for cached in pair.triton._cache.values())
    decode = pair.triton.plan_for_capture(
        ForwardBatch(**causal_args(pair, ForwardMode.DECODE, [0, 1], [3, 4], [1, 1])))
    with pytest.raises(ValueError, match="differs from the captured"):
        pair.triton.plan_for_replay(
            ForwardBatch(**causal_args(pair, ForwardMode.DECODE, [0, 1, 2], [3, 4, 5], [1, 1, 1])),
            decode)


def test_metadata_is_planned_once_per_uniform_shape():
    """Equal shapes share metadata (so replays need no refresh); a shape change is refused."""
    pair = Pair()
    first = ForwardBatch(**causal_args(pair, ForwardMode.DECODE, [0, 1], [3, 4], [1, 1]))
    second = ForwardBatch(**causal_args(pair, ForwardMode.DECODE, [2, 5], [9, 1], [1, 1]))
    metadata = pair.triton.plan_for_capture(first)
    assert pair.triton.plan(second) is metadata
    pair.triton.plan_for_replay(second, metadata)
    other = ForwardBatch(**causal_args(pair, ForwardMode.DECODE, [2], [9], [1]))
    with pytest.raises(ValueError, match="differs from the captured"):
        pair.triton.plan_for_replay(other, metadata)


@pytest.mark.parametrize("width,kv_heads", [(4096, 3), (512, 3), (2048, 8), (64, 1)])
def test_warm_up_lengths_reach_every_split_count(width, kv_heads):
    """``warm_up_lengths`` (the bench prefills each before timing) covers every split count
    a forward of any token count can pick, one length per count (brute force)."""
    from types import SimpleNamespace

    from eagle_hal.ops.triton.attention import TritonAttentionBackend

    backend = object.__new__(TritonAttentionBackend)
    backend.config = SimpleNamespace(req_to_token=torch.zeros(1, width), num_kv_heads=kv_heads)
    lengths = backend.warm_up_lengths()
    picked = [kernels.choose_num_splits(n, kv_heads, width) for n in lengths]
    every = {kernels.choose_num_splits(n, kv_heads, width) for n in range(1, 4 * width)}
    assert sorted(set(picked)) == sorted(every) and len(picked) == len(set(picked))
