"""AiterDecodeAttention over the aiter EMULATION, against the core's reference attention, and
the ROCm backend's choice of it.

Oracle: ``TorchAttentionBackend`` (slot gathers and SDPA, the executable statement of the
attention contract) on an identical copy of the KV storage. The emulation reads the op's
own cache layout, so a wrong page table, view or layout in the adapter shows as a mismatch.
"""

from __future__ import annotations

import re
import sys
import types

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal.engine.kv_cache import KVStorage
from eagle_hal.hal.attention import AttentionConfig, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.attention_reference import TorchAttentionBackend
from eagle_hal.testing.graphs import EmulatedGraphCapture
from eagle_hal_rocm import attention_aiter
from eagle_hal_rocm.aiter_support import probe_note, resolve_aiter
from eagle_hal_rocm.attention_aiter import AiterDecodeAttention
from eagle_hal_rocm.backend import RocmBackend
from eagle_hal_rocm.plugin import DESCRIPTOR

LAYERS = 2


@pytest.fixture
def make_pair(paired_attention):
    """``make_pair(op, prefix_lens, **settings)``: one paged KV state behind the aiter
    adapter over ``op`` and the reference attention (``../paired_attention.py``)."""
    def make(op, prefix_lens, **settings):
        settings.setdefault("reserve", 4)
        return paired_attention.PairedAttention(
            lambda config, fallback: AiterDecodeAttention(config, op, fallback), prefix_lens,
            run_seed=1, **settings)
    return make


@pytest.mark.parametrize("page_size", [16, 32])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_decode_equals_the_reference(make_pair, aiter_emulation, page_size, head_dim, dtype):
    """Ragged contexts (empty prefix, inside one page, two 256-token partitions), GQA 4:1."""
    op = aiter_emulation.PagedAttentionV1Emulation()
    pair = make_pair(op, [0, 7, 37, 300], page_size=page_size, head_dim=head_dim, dtype=dtype)
    pair.assert_agree(pair.batch(ForwardMode.DECODE, [1, 1, 1, 1]))
    assert len(op.calls) == LAYERS  # one op call per layer, nothing else went to aiter
    assert op.calls[0] == {"max_context_len": 301, "num_seqs": 4, "kv_cache_layout": "NHD",
                           "block_size": page_size}


@pytest.mark.parametrize("mode,extend_lens", [(ForwardMode.EXTEND, [3, 1, 5, 2]),
                                              (ForwardMode.DRAFT_EXTEND, [2, 2, 1, 3])])
def test_other_modes_stay_on_the_fallback(make_pair, aiter_emulation, mode, extend_lens):
    """Multi-token causal modes never reach aiter (its kernel skips them) and still agree."""
    op = aiter_emulation.PagedAttentionV1Emulation()
    pair = make_pair(op, [0, 7, 37, 300], reserve=6)
    pair.assert_agree(pair.batch(mode, extend_lens))
    assert op.calls == []


def test_decode_reads_kv_the_engine_moved(make_pair, aiter_emulation):
    """After KVStorage.move_kv (the accepted-path compaction) the op reads the moved K/V:
    it reads the store itself, not a copy made at write time."""
    pair = make_pair(aiter_emulation.PagedAttentionV1Emulation(), [20, 50], reserve=8)
    src = torch.cat([pair.req_to_token[r, p:p + 3]
                     for r, p in zip(pair.rows, pair.prefix_lens, strict=False)])
    dst = torch.cat([pair.req_to_token[r, p - 3:p]
                     for r, p in zip(pair.rows, pair.prefix_lens, strict=False)])
    new_k, new_v = pair.qkv(6, 42)[1:]
    for store in (pair.adapter.config.kv_store, pair.reference.config.kv_store):
        store.write_kv(0, src, new_k, new_v)
        store.move_kv(src, dst)
    pair.assert_agree(pair.batch(ForwardMode.DECODE, [1, 1]))


def test_a_transposed_cache_is_caught(make_pair, aiter_emulation, monkeypatch):
    """An adapter handing the op an HND-ordered cache as NHD disagrees with the reference
    (or is refused): the emulation reads aiter's layout, not ours."""
    def transposed(buffer, page_size):
        pages = buffer.view(-1, page_size, *buffer.shape[1:])
        return pages.transpose(1, 2).contiguous().view(pages.shape)

    monkeypatch.setattr(attention_aiter, "paged_view", transposed)
    pair = make_pair(aiter_emulation.PagedAttentionV1Emulation(), [9, 40, 70])
    batch = pair.batch(ForwardMode.DECODE, [1, 1, 1])
    try:
        got = pair.run(pair.adapter, batch)
    except ValueError:
        return
    assert (got - pair.run(pair.reference, batch)).abs().max() > 0.1


def test_graph_replay_with_longer_contexts(make_pair, aiter_emulation):
    """Captured once at full-row width; replays see new slots and lengths written in place."""
    op = aiter_emulation.PagedAttentionV1Emulation()
    pair = make_pair(op, [3, 30, 255], reserve=4)
    static = pair.batch(ForwardMode.DECODE, [1, 1, 1])
    static.attn_metadata = pair.adapter.plan_for_capture(static)
    assert static.attn_metadata.max_context_len == pair.req_to_token.shape[1]
    q, k, v = pair.qkv(3, 5)
    capture = EmulatedGraphCapture()
    graph = capture.new_graph()
    out = capture.record(graph, lambda: pair.adapter.forward(0, q, k, v, static))
    first = pair.batch(ForwardMode.DECODE, [1, 1, 1])  # the capture wrote K/V: so must the oracle
    first.attn_metadata = pair.reference.plan(first)
    pair.reference.forward(0, q, k, v, first)
    for step in (1, 2):
        prefix_lens = tuple(p + step for p in pair.prefix_lens)
        fresh = pair.batch(ForwardMode.DECODE, [1, 1, 1], prefix_lens)
        static.prefix_lens.copy_(fresh.prefix_lens)
        static.out_cache_loc.copy_(fresh.out_cache_loc)
        static.prefix_lens_cpu = prefix_lens
        new_q, new_k, new_v = pair.qkv(3, 10 + step)
        q.copy_(new_q), k.copy_(new_k), v.copy_(new_v)
        pair.adapter.plan_for_replay(static, static.attn_metadata)
        assert pair.adapter.replay_host_updates(static, static.attn_metadata) is None
        graph.replay()
        fresh.attn_metadata = pair.reference.plan(fresh)
        expected = pair.reference.forward(0, new_q, new_k, new_v, fresh)
        torch.testing.assert_close(out.float(), expected.float(), atol=2e-2, rtol=2e-2)
    assert {c["max_context_len"] for c in op.calls} == {pair.req_to_token.shape[1]}


def test_refuses_a_geometry_the_op_does_not_take(make_pair, aiter_emulation):
    """Page size 64, float32 and head size 48 are refused with the reason."""
    op = aiter_emulation.PagedAttentionV1Emulation()
    for kwargs, reason in (({"page_size": 64}, "page size 64"),
                           ({"dtype": torch.float32}, "KV dtype torch.float32"),
                           ({"head_dim": 48}, "head size 48")):
        with pytest.raises(ValueError, match=reason):
            make_pair(op, [4], **kwargs)


# -- the backend's choice -------------------------------------------------------------------


def make_config(dtype=torch.bfloat16, page_size=16, head_dim=64):
    store = KVStorage(num_layers=1, num_slots=256, num_kv_heads=2, head_dim=head_dim,
                      layout=KVLayout(page_size=page_size), dtype=dtype, device="cpu")
    return AttentionConfig(4, 2, head_dim, 1, 0.125, store, torch.zeros(4, 64, dtype=torch.int64))


def test_without_opt_in_the_shared_path_is_unchanged(aiter_emulation, monkeypatch):
    """aiter importable but EAGLE_HAL_ROCM_AITER unset: the shared attention, notes say so."""
    monkeypatch.setitem(sys.modules, "aiter", aiter_emulation.emulated_aiter_module())
    monkeypatch.delenv("EAGLE_HAL_ROCM_AITER", raising=False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    assert type(backend.create_attention_backend(make_config())) is TorchAttentionBackend
    assert "aiter not used (opt in with EAGLE_HAL_ROCM_AITER=1)" in backend.capabilities.notes
    assert backend.library_versions() == {}
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    shared = RocmBackend(DESCRIPTOR, parse_device("cpu")).create_attention_backend(make_config())
    assert type(shared).__name__ == "TritonAttentionBackend"


def test_opted_in_with_aiter_present(emulated_aiter, monkeypatch):
    """Eligible models get the adapter over the shared path; others the shared path alone;
    capabilities and library versions name what is used."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    attention = backend.create_attention_backend(make_config())
    assert isinstance(attention, AiterDecodeAttention)
    assert type(attention.fallback).__name__ == "TritonAttentionBackend"
    assert attention.paged_attention_v1 is emulated_aiter.paged_attention_v1
    for config in (make_config(dtype=torch.float32), make_config(page_size=64)):
        assert type(backend.create_attention_backend(config)).__name__ == "TritonAttentionBackend"
    notes = backend.capabilities.notes
    assert "decode attention: aiter 0+emulation paged_attention_v1 (kv_cache_layout NHD" in notes
    assert "every other mode and geometry: the shared Triton kernel" in notes
    assert backend.library_versions() == {"aiter": "0+emulation"}


@pytest.mark.parametrize("installed,reason", [
    (None, "aiter failed to import (ModuleNotFoundError"),
    (types.ModuleType("aiter"), "has no paged_attention_v1"),
])
def test_opted_in_but_unusable_warns_and_keeps_the_shared_path(monkeypatch, installed, reason):
    """A missing or incomplete aiter: a warning naming why, the shared path, the notes."""
    monkeypatch.setitem(sys.modules, "aiter", installed)
    monkeypatch.setenv("EAGLE_HAL_ROCM_AITER", "1")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    with pytest.warns(RuntimeWarning, match=re.escape(reason)):
        attention = backend.create_attention_backend(make_config())
    assert type(attention) is TorchAttentionBackend
    assert reason in backend.capabilities.notes


def test_architecture_gate_and_probe_notes(emulated_aiter, monkeypatch):
    """On a GPU only gfx90a/gfx942/gfx950 qualify; the probe's clause never imports aiter."""
    env = {"EAGLE_HAL_ROCM_AITER": "1"}
    assert resolve_aiter("gfx942:sramecc+:xnack-", env).paged_attention_v1 is not None
    rdna = resolve_aiter("gfx1100", env)
    assert rdna.paged_attention_v1 is None and "not gfx1100" in rdna.reason
    off = "aiter not used (opt in with EAGLE_HAL_ROCM_AITER=1)"
    assert resolve_aiter("gfx950", {}).reason == off
    assert "neither 0 nor 1" in resolve_aiter(None, {"EAGLE_HAL_ROCM_AITER": "yes"}).reason
    assert probe_note(env) == (
        "EAGLE_HAL_ROCM_AITER=1: aiter paged decode where the model's geometry allows")
    assert probe_note({}) == (
        "aiter paged decode off (installed; opt in with EAGLE_HAL_ROCM_AITER=1)")
    monkeypatch.delitem(sys.modules, "aiter")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert probe_note(env) == (
        "EAGLE_HAL_ROCM_AITER=1 but aiter is not installed: decode on the shared path")
