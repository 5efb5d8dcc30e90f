"""NpuAttentionBackend over the operator emulations, against the core's reference attention.

Oracle: ``TorchAttentionBackend`` (dense SDPA over gathered slots, the executable statement
of the attention contract) on an identical copy of the KV storage. Runs in bfloat16 with the
emulation's dtype checks on; the end-to-end test runs float32 (the emulation told to allow
it) so that greedy tokens can be compared exactly with plain decoding on the CPU backend.
"""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, PageAllocator, RequestTokenTable
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_reference import TorchAttentionBackend
from eagle_hal_npu.attention import NpuAttentionBackend
from eagle_hal_npu.backend import NpuBackend
from eagle_hal_npu.plugin import DESCRIPTOR

HEADS, KV_HEADS, HEAD_DIM, LAYERS = 4, 2, 16, 2


class Pair:
    """The same paged KV state behind an NPU backend and the reference backend."""

    def __init__(self, emulation, prefix_lens, reserve, *, dtype=torch.bfloat16, seed=0, **opts):
        torch.manual_seed(seed)
        npu = NpuBackend(DESCRIPTOR, parse_device("cpu"), ops=emulation.emulated_ops(
            ignore_mask_in_sparse_modes=opts.pop("ignore_mask", ())))
        layout = npu.kv_layout()
        self.allocator = PageAllocator(num_pages=24, page_size=layout.page_size)
        self.table = RequestTokenTable(self.allocator, max_requests=8, max_context=2048)
        self.rows = [self.table.add_request() for _ in prefix_lens]
        self.rows.reverse()  # table rows in a different order than batch order
        for row, p in zip(self.rows, prefix_lens, strict=True):
            self.table.reserve(row, p + reserve)
        device_table = DeviceTokenTable(self.table, layout, "cpu")
        device_table.sync()
        self.req_to_token = device_table.tensor
        stores = []
        for _ in range(2):
            stores.append(KVStorage.for_allocator(self.allocator, num_layers=LAYERS,
                                                  num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                                                  layout=layout, dtype=dtype, device="cpu"))
        for layer in range(LAYERS):
            for get in ("k_buffer", "v_buffer"):
                noise = torch.randn_like(getattr(stores[0], get)(layer), dtype=torch.float32)
                for store in stores:
                    getattr(store, get)(layer).copy_(noise)

        def config(store):
            return AttentionConfig(HEADS, KV_HEADS, HEAD_DIM, LAYERS, HEAD_DIM**-0.5, store,
                                   self.req_to_token)

        self.npu = NpuAttentionBackend(config(stores[0]), npu.ops(), **opts)
        self.reference = TorchAttentionBackend(config(stores[1]))
        self.prefix_lens = tuple(prefix_lens)
        self.dtype = dtype

    def slots(self, b, start, end):
        return self.req_to_token[self.rows[b], start:end].long()

    def batch(self, mode, extend_lens, **extra):
        out_cache_loc = extra.pop("out_cache_loc", None)
        if out_cache_loc is None:
            out_cache_loc = torch.cat([
                self.slots(b, p, p + n)
                for b, (p, n) in enumerate(zip(self.prefix_lens, extend_lens, strict=True))
            ])
        t = int(out_cache_loc.shape[0])
        return ForwardBatch(
            mode=mode, input_ids=torch.zeros(t, dtype=torch.long),
            positions=torch.zeros(t, dtype=torch.long),
            table_rows=torch.tensor(self.rows), prefix_lens=torch.tensor(self.prefix_lens),
            extend_lens=torch.tensor(extend_lens), out_cache_loc=out_cache_loc.to(torch.int32),
            prefix_lens_cpu=self.prefix_lens, extend_lens_cpu=tuple(extend_lens), **extra,
        )

    def run(self, batch):
        """Both backends over every layer with the same q/k/v; outputs per layer."""
        t = batch.num_tokens
        results = []
        for backend in (self.npu, self.reference):
            torch.manual_seed(99)
            batch.attn_metadata = backend.plan(batch)
            outs = []
            for layer in range(LAYERS):
                q = torch.randn(t, HEADS, HEAD_DIM).to(self.dtype)
                k = torch.randn(t, KV_HEADS, HEAD_DIM).to(self.dtype)
                v = torch.randn(t, KV_HEADS, HEAD_DIM).to(self.dtype)
                outs.append(backend.forward(layer, q, k, v, batch).float())
            results.append(torch.stack(outs))
        return results


def assert_agree(pair, batch):
    npu, reference = pair.run(batch)
    torch.testing.assert_close(npu, reference, atol=2e-2, rtol=2e-2)
    for layer in range(LAYERS):  # the KV writes landed in the same slots
        assert torch.equal(pair.npu.config.kv_store.k_buffer(layer),
                           pair.reference.config.kv_store.k_buffer(layer))


@pytest.mark.parametrize("mode", [ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND])
def test_ragged_extend_over_prefixes(emulation, mode):
    """Chunked prefill with empty, short and page-crossing prefixes (sparse_mode 3)."""
    pair = Pair(emulation, [0, 5, 126, 300], reserve=9)
    assert_agree(pair, pair.batch(mode, [7, 1, 9, 3]))


def test_decode(emulation):
    """One query per request, no mask."""
    pair = Pair(emulation, [1, 129, 40], reserve=1, seed=1)
    assert_agree(pair, pair.batch(ForwardMode.DECODE, [1, 1, 1]))


def random_tree(rng, n):
    parents = [-1] + [rng.randrange(i) for i in range(1, n)]
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        j = i
        while j >= 0:
            mask[i, j] = True
            j = parents[j]
    return mask


@pytest.mark.parametrize("with_mask", [False, True])
def test_target_verify(emulation, with_mask):
    """Tree verify: the composite (default) and the explicit-mask path agree with the
    reference on random trees."""
    rng = random.Random(2)
    n = 6
    pair = Pair(emulation, [4, 127, 250], reserve=n, seed=2, verify_with_mask=with_mask)
    tree = torch.stack([random_tree(rng, n) for _ in range(3)])
    assert_agree(pair, pair.batch(ForwardMode.TARGET_VERIFY, [n] * 3, tree_mask=tree))
    assert pair.npu.tree_mask_mode == TreeMaskMode.TREE_BLOCK


def test_ignored_mask_is_caught_and_the_composite_is_immune(emulation):
    """With the mask-ignoring defect simulated, the explicit-mask verify disagrees with the
    reference (what the conformance comparison reports); the default composite, which
    hands the operator no tree mask, still agrees."""
    rng = random.Random(3)
    n = 5
    tree = torch.stack([random_tree(rng, n) for _ in range(2)])
    broken = Pair(emulation, [6, 140], reserve=n, seed=3, verify_with_mask=True, ignore_mask=(0,))
    npu, reference = broken.run(broken.batch(ForwardMode.TARGET_VERIFY, [n] * 2, tree_mask=tree))
    assert (npu - reference).abs().max() > 0.05
    immune = Pair(emulation, [6, 140], reserve=n, seed=3, ignore_mask=(0,))
    assert_agree(immune, immune.batch(ForwardMode.TARGET_VERIFY, [n] * 2, tree_mask=tree))


def test_draft_decode_branches(emulation):
    """K branches per request, each over the prefix plus its own ancestor slots."""
    branches, depth = 3, 3
    pair = Pair(emulation, [10, 131], reserve=branches * depth, seed=4)
    draft_slots = []
    for b, p in enumerate(pair.prefix_lens):
        for k in range(branches):  # branch k's chain: positions p + j * K + k
            draft_slots.append(torch.stack([pair.slots(b, p + j * branches + k,
                                                       p + j * branches + k + 1)[0]
                                            for j in range(depth)]))
    draft_kv_slots = torch.stack(draft_slots)  # [B * K, depth]
    batch = pair.batch(ForwardMode.DRAFT_DECODE, [branches] * 2,
                       out_cache_loc=draft_kv_slots[:, -1],
                       draft_kv_slots=draft_kv_slots.to(torch.int32), num_branches=branches)
    assert_agree(pair, batch)


def test_page_size_and_layout_are_enforced(emulation):
    """The backend refuses storage it cannot hand the fused operator."""
    from eagle_hal.hal.kv_layout import KVLayout

    store = KVStorage(num_layers=1, num_slots=64, num_kv_heads=1, head_dim=4,
                      layout=KVLayout(page_size=16), dtype=torch.bfloat16, device="cpu")
    config = AttentionConfig(1, 1, 4, 1, 0.5, store, torch.zeros(1, 8, dtype=torch.int32))
    with pytest.raises(ValueError, match="page size 128"):
        NpuAttentionBackend(config, emulation.emulated_ops())


def test_scale_keyword_of_older_releases(emulation):
    """An operator that only knows ``scale_value`` is retried with it, once."""
    inner = emulation.FusedAttentionEmulation()

    def old_signature(q, k, v, *, scale_value, **kw):
        return inner(q, k, v, scale=scale_value, **kw)

    from eagle_hal_npu.ops import NpuOps

    ops = NpuOps(old_signature, emulation.emulated_reshape_and_cache)
    q = torch.randn(1, 1, 2, 16).to(torch.bfloat16)
    k = torch.randn(1, 4, 2, 16).to(torch.bfloat16)
    out, _ = ops.fused_attention(q, k, k, scale=0.25, num_heads=2, input_layout="BSND")
    assert ops.scale_keyword == "scale_value" and out.shape == q.shape


def test_end_to_end_generation_equals_plain_decoding(emulation):
    """EAGLE through the emulated NPU backend on the CPU emits plain greedy decoding's
    tokens (oracle: the CPU backend without a draft)."""
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.registry import select_backend
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import matching_eagle1, near_bigram_target

    target = near_bigram_target(seed=5)
    head = matching_eagle1(target, noise=0.02)
    prompts = [[1, 2, 3, 4, 5], list(range(10, 40)), [42], [5, 5, 6, 6, 7]]
    params = SamplingParams(max_new_tokens=24)
    cpu = select_backend("cpu")
    expected = LLM.from_models(cpu, target, None, spec=SpecConfig(num_steps=0)).generate(
        prompts, params)
    npu = NpuBackend(DESCRIPTOR, parse_device("cpu"),
                     ops=emulation.emulated_ops(allow_float32=True))
    llm = LLM.from_models(npu, target, head, spec=SpecConfig(3, 2, 6), page_size=128,
                          kv_cache_tokens=8 * 128, max_batch_size=4)
    outputs = llm.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [e.token_ids for e in expected]
    assert sum(o.accept_length for o in outputs) / len(outputs) > 1.5
    assert llm.used_pages == 0
    calls = npu.ops().fused_infer_attention_score.calls  # the fused path really ran
    assert {c["sparse_mode"] for c in calls} == {0, 3}
    assert any(c["softmax_lse_flag"] for c in calls)  # composite verify / draft decode
