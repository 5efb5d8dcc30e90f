"""MateCausalAttention over the mate EMULATION, against the core's reference attention, and
the MUSA backend's choice of it.

Oracle: ``TorchAttentionBackend`` (slot gathers and SDPA) on an identical copy of the KV
storage. The emulation reads mate's paged layout, so a wrong page table, view, length or
causal alignment in the adapter shows as a mismatch.
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
from eagle_hal.ops.attention_reference import TorchAttentionBackend, TorchAttentionMetadata
from eagle_hal_musa import attention_mate
from eagle_hal_musa.attention_mate import MateCausalAttention
from eagle_hal_musa.backend import MusaBackend
from eagle_hal_musa.mate_support import probe_note, resolve_mate
from eagle_hal_musa.plugin import DESCRIPTOR

LAYERS, KV_HEADS, HEAD_DIM = 2, 2, 64  # as in paired_attention.py


@pytest.fixture
def make_pair(paired_attention):
    """``make_pair(op, prefix_lens, **settings)``: one paged KV state behind the mate
    adapter over ``op`` and the reference attention (``../paired_attention.py``)."""
    def make(op, prefix_lens, **settings):
        settings.setdefault("reserve", 10)
        return paired_attention.PairedAttention(
            lambda config, fallback: MateCausalAttention(config, op, fallback), prefix_lens,
            run_seed=0, **settings)
    return make


CAUSAL_CASES = [(ForwardMode.EXTEND, [6, 1, 9, 3]), (ForwardMode.DECODE, [1, 1, 1, 1]),
                (ForwardMode.DRAFT_EXTEND, [2, 3, 1, 2])]


@pytest.mark.parametrize("mode,extend_lens", CAUSAL_CASES, ids=lambda c: getattr(c, "value", ""))
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_causal_modes_equal_the_reference(make_pair, mate_emulation, mode, extend_lens, page_size,
                                          dtype):
    """Empty, short and page-crossing prefixes, ragged new tokens, GQA 4:1."""
    op = mate_emulation.FlashAttnWithKVCacheEmulation()
    pair = make_pair(op, [0, 5, 37, 130], page_size=page_size, dtype=dtype)
    pair.assert_agree(pair.batch(mode, extend_lens))
    assert len(op.calls) == LAYERS
    assert op.calls[0] == {"causal": True, "max_seqlen_q": max(extend_lens),
                           "page_size": page_size, "batch": 4}


def test_verify_draft_decode_and_captures_stay_on_sdpa(make_pair, mate_emulation):
    """Tree verify, draft decode and any captured forward never call mate, and agree."""
    op = mate_emulation.FlashAttnWithKVCacheEmulation()
    pair = make_pair(op, [3, 20, 70])
    tree = torch.tril(torch.ones(3, 4, 4, dtype=torch.bool))
    pair.assert_agree(pair.batch(ForwardMode.TARGET_VERIFY, [4, 4, 4], tree_mask=tree))
    slots = torch.stack([pair.req_to_token[r, p:p + 2].long()
                         for r, p in zip(pair.rows, pair.prefix_lens, strict=False)
                         for _ in range(2)])
    draft = pair.batch(ForwardMode.DRAFT_DECODE, [2, 2, 2], draft_kv_slots=slots, num_branches=2)
    draft.out_cache_loc = slots[:, -1]
    pair.assert_agree(draft)
    decode = pair.batch(ForwardMode.DECODE, [1, 1, 1])
    assert isinstance(pair.adapter.plan_for_capture(decode), TorchAttentionMetadata)
    pair.assert_agree(decode, capture=True)
    assert op.calls == []


def test_reads_kv_the_engine_moved(make_pair, mate_emulation):
    """After KVStorage.move_kv (the accepted-path compaction) mate reads the moved K/V."""
    pair = make_pair(mate_emulation.FlashAttnWithKVCacheEmulation(), [20, 50])
    src = torch.cat([pair.req_to_token[r, p:p + 3]
                     for r, p in zip(pair.rows, pair.prefix_lens, strict=False)])
    dst = torch.cat([pair.req_to_token[r, p - 3:p]
                     for r, p in zip(pair.rows, pair.prefix_lens, strict=False)])
    gen = torch.Generator().manual_seed(42)
    new_k, new_v = (torch.randn(6, KV_HEADS, HEAD_DIM, generator=gen).to(pair.dtype)
                    for _ in range(2))
    for store in (pair.adapter.config.kv_store, pair.reference.config.kv_store):
        store.write_kv(0, src, new_k, new_v)
        store.move_kv(src, dst)
    pair.assert_agree(pair.batch(ForwardMode.DECODE, [1, 1]))


def test_a_transposed_cache_is_caught(make_pair, mate_emulation, monkeypatch):
    """An adapter handing mate an HND-ordered page as NHD disagrees with the reference."""
    def transposed(buffer, page_size):
        pages = buffer.view(-1, page_size, *buffer.shape[1:])
        return pages.transpose(1, 2).contiguous().view(pages.shape)

    monkeypatch.setattr(attention_mate, "paged_view", transposed)
    pair = make_pair(mate_emulation.FlashAttnWithKVCacheEmulation(), [9, 40, 70])
    batch = pair.batch(ForwardMode.EXTEND, [3, 2, 4])
    assert (pair.run(pair.adapter, batch) - pair.run(pair.reference, batch)).abs().max() > 0.1


# -- the backend's choice -------------------------------------------------------------------


def make_config(dtype=torch.bfloat16, head_dim=64):
    store = KVStorage(num_layers=1, num_slots=256, num_kv_heads=2, head_dim=head_dim,
                      layout=KVLayout(page_size=16), dtype=dtype, device="cpu")
    return AttentionConfig(4, 2, head_dim, 1, 0.125, store, torch.zeros(4, 64, dtype=torch.int64))


def test_without_opt_in_sdpa_is_unchanged(mate_emulation, monkeypatch):
    """mate importable but EAGLE_HAL_MUSA_MATE unset: SDPA alone, and the notes say so."""
    monkeypatch.setitem(sys.modules, "mate", mate_emulation.emulated_mate_module())
    monkeypatch.delenv("EAGLE_HAL_MUSA_MATE", raising=False)
    backend = MusaBackend(DESCRIPTOR, parse_device("cpu"))
    assert type(backend.create_attention_backend(make_config())) is TorchAttentionBackend
    assert "mate not used (opt in with EAGLE_HAL_MUSA_MATE=1)" in backend.capabilities.notes
    assert backend.library_versions() == {}


def test_opted_in_with_mate_present(emulated_mate):
    """bfloat16/float16 models get the adapter, float32 ones SDPA; notes name what is used."""
    backend = MusaBackend(DESCRIPTOR, parse_device("cpu"))
    attention = backend.create_attention_backend(make_config())
    assert isinstance(attention, MateCausalAttention)
    assert attention.flash_attn_with_kvcache is emulated_mate.flash_attn_with_kvcache
    fp32 = backend.create_attention_backend(make_config(dtype=torch.float32))
    assert type(fp32) is TorchAttentionBackend
    notes = backend.capabilities.notes
    assert "attention: mate 0+emulation flash_attn_with_kvcache (paged, causal" in notes
    assert "TARGET_VERIFY, DRAFT_DECODE, captured forwards and other geometries: SDPA" in notes
    assert backend.library_versions() == {"mate": "0+emulation"}


@pytest.mark.parametrize("installed,reason", [
    (None, "mate failed to import (ModuleNotFoundError"),
    (types.ModuleType("mate"), "has no flash_attn_with_kvcache"),
])
def test_opted_in_but_unusable_warns_and_keeps_sdpa(monkeypatch, installed, reason):
    """A missing mate, or an unrelated package named mate: a warning, SDPA, the notes."""
    monkeypatch.setitem(sys.modules, "mate", installed)
    monkeypatch.setenv("EAGLE_HAL_MUSA_MATE", "1")
    backend = MusaBackend(DESCRIPTOR, parse_device("cpu"))
    with pytest.warns(RuntimeWarning, match=re.escape(reason)):
        attention = backend.create_attention_backend(make_config())
    assert type(attention) is TorchAttentionBackend
    assert reason in backend.capabilities.notes


def test_architecture_gate_and_probe_notes(emulated_mate, monkeypatch):
    """On a MUSA GPU only MP31 (3.1) qualifies; the probe's clause never imports mate."""
    env = {"EAGLE_HAL_MUSA_MATE": "1"}
    assert resolve_mate((3, 1), env).flash_attn_with_kvcache is not None
    older = resolve_mate((2, 2), env)
    assert older.flash_attn_with_kvcache is None and "not 2.2" in older.reason
    assert "neither 0 nor 1" in resolve_mate(None, {"EAGLE_HAL_MUSA_MATE": "on"}).reason
    assert probe_note(env) == (
        "EAGLE_HAL_MUSA_MATE=1: mate flash attention where the model's geometry allows")
    assert probe_note({}) == (
        "mate flash attention off (installed; opt in with EAGLE_HAL_MUSA_MATE=1)")
    monkeypatch.delitem(sys.modules, "mate")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    assert probe_note(env) == "EAGLE_HAL_MUSA_MATE=1 but mate is not installed: attention on SDPA"
