"""Area 4, attention: the backend's ``AttentionBackend`` in every forward mode against a
dense float64 oracle, over page sizes (1, 16, 64 and any the backend requires or prefers),
dtypes, ragged batches and every tree-mask layout the backend accepts.

Each case fills scattered pages of a ``KVStorage`` in the backend's layout with random K/V,
runs ``plan`` and ``forward`` for layer 1 (of 2, so a layer mix-up shows), and compares
each query's output with softmax attention over exactly the slots the mode's definition
(``eagle_hal.hal.attention``) lets it see. Tolerances are the backend's own, per dtype.
For a tree-mask layout the suite sets ``attention_backend.tree_mask_mode`` before planning;
a backend that lists a layout in ``Capabilities.tree_mask_modes`` must honour that.

Backends that declare ``Capabilities.sliding_window`` are checked with a window on layer 1
(layer 0 full, so a mix-up of the layers shows): each query sees only the keys at positions
``> p - W`` of what its mode allows, tree nodes at their depth-based positions, draft
ancestors at consecutive positions; windows short enough to cut a request's own tokens, its
tree ancestors and its draft ancestors as well as its prefix. Backends that declare
``Capabilities.logit_softcap`` are checked with capped scores, alone and with a window.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.compare import assert_close
from eagle_hal.conformance.paged import (
    PagedScene,
    encode_tree_mask,
    page_size_params,
    preferred_page_size,
    random_parents,
)
from eagle_hal.conformance.requirements import requires
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.tree_mask import TreeMaskMode

DTYPES = [pytest.param(d, marks=requires(f"dtype:{d}"), id=d) for d in ("float32", "bfloat16")]
VARIANTS = [
    pytest.param((ForwardMode.EXTEND, None), id="extend"),
    pytest.param((ForwardMode.DECODE, None), id="decode"),
    pytest.param((ForwardMode.DRAFT_EXTEND, None), id="draft_extend"),
    pytest.param((ForwardMode.DRAFT_DECODE, None), id="draft_decode"),
    *[
        pytest.param((ForwardMode.TARGET_VERIFY, m), marks=requires(f"tree_mask:{m}"),
                     id=f"target_verify-{m}")
        for m in TreeMaskMode.ALL
    ],
]
LAYER = 1
# windows per mode: each cuts what the mode adds (own tokens, tree or draft ancestors) too
WINDOWS = {ForwardMode.EXTEND: 7, ForwardMode.DECODE: 7, ForwardMode.DRAFT_EXTEND: 2,
           ForwardMode.TARGET_VERIFY: 3, ForwardMode.DRAFT_DECODE: 2}
SOFTCAP = 1.5  # below the scores' spread (q . k / sqrt(D) of unit normals), so it bites
WINDOW_VARIANTS = [
    pytest.param(mode, id=mode.value) for mode in (
        ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.DRAFT_EXTEND,
        ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY)
]
NODES = 5  # verify tree nodes per request
BRANCHES, DEPTH = 3, 3  # draft decode


def build_case(scene: PagedScene, mode: ForwardMode, mask_mode: str | None,
               prefix_extra: int = 0) -> tuple[Any, list[list[int]]]:
    """A ragged batch of three requests for ``mode``, each prefix ``prefix_extra`` tokens
    longer than the default; returns it and each token's visible slots (the oracle's
    reading of the mode's definition)."""
    rows = scene.rows[:3]
    if mode in (ForwardMode.EXTEND, ForwardMode.DECODE, ForwardMode.DRAFT_EXTEND):
        prefix_lens = [0, 5, 37] if mode is not ForwardMode.DECODE else [1, 9, 37]
        prefix_lens = [p + prefix_extra for p in prefix_lens]
        extend_lens = {ForwardMode.EXTEND: [4, 1, 7], ForwardMode.DECODE: [1, 1, 1],
                       ForwardMode.DRAFT_EXTEND: [2, 3, 1]}[mode]
        scene.fill_prefixes(rows, prefix_lens)
        out, visible = [], []
        for row, p, n in zip(rows, prefix_lens, extend_lens, strict=True):
            out += scene.extend_rows(row, n)
            visible += [scene.table[row, : p + i + 1].tolist() for i in range(n)]
        return scene.forward_batch(mode, rows, prefix_lens, extend_lens, out), visible
    prefix_lens = [p + prefix_extra for p in (1, 17, 40)]
    scene.fill_prefixes(rows, prefix_lens)
    if mode is ForwardMode.TARGET_VERIFY:
        assert mask_mode is not None
        parents = random_parents(scene.gen, len(rows), NODES)
        out, visible = [], []
        for b, (row, p) in enumerate(zip(rows, prefix_lens, strict=True)):
            slots = scene.extend_rows(row, NODES)
            out += slots
            for i in range(NODES):
                chain, j = [], i
                while j >= 0:
                    chain.append(slots[j])
                    j = int(parents[b, j])
                visible.append(scene.table[row, :p].tolist() + sorted(chain))
        mask = encode_tree_mask(parents, prefix_lens, mask_mode)
        batch = scene.forward_batch(mode, rows, prefix_lens, [NODES] * 3, out, tree_mask=mask)
        return batch, visible
    # DRAFT_DECODE: each branch row sees its prefix, its ancestors' scratch slots, itself.
    pool = scene.scratch_slots(len(rows) * BRANCHES * DEPTH)
    ancestors, own = pool[: -len(rows) * BRANCHES], pool[-len(rows) * BRANCHES :]
    for layer in range(scene.geometry.num_layers):
        scene.write(layer, ancestors, *scene.random_kv(len(ancestors)))
    picks = torch.randint(0, len(ancestors), (len(rows) * BRANCHES, DEPTH - 1),
                          generator=scene.gen)
    kv_slots = torch.tensor([[ancestors[int(i)] for i in r] + [own[n]]
                             for n, r in enumerate(picks)])
    visible = [scene.table[rows[r // BRANCHES], : prefix_lens[r // BRANCHES]].tolist()
               + kv_slots[r].tolist()
               for r in range(len(own))]
    batch = scene.forward_batch(mode, rows, prefix_lens, [BRANCHES] * 3, own,
                                draft_kv_slots=kv_slots, num_branches=BRANCHES)
    return batch, visible


def build_window_case(scene: PagedScene, mode: ForwardMode, mask_mode: str,
                      window: int) -> tuple[Any, list[list[int]]]:
    """A ragged batch of three requests for ``mode`` whose layer-1 window is ``window``;
    returns it and each token's visible slots: what the mode lets it see, at positions
    ``> p - window`` (the positions ``eagle_hal.hal.attention`` defines)."""
    rows = scene.rows[:3]
    if mode.is_causal_extend:
        prefix_lens = [1, 9, 37] if mode is ForwardMode.DECODE else [0, 5, 37]
        extend_lens = {ForwardMode.EXTEND: [4, 1, 12], ForwardMode.DECODE: [1, 1, 1],
                       ForwardMode.DRAFT_EXTEND: [2, 3, 1]}[mode]
        scene.fill_prefixes(rows, prefix_lens)
        out, visible = [], []
        for row, p, n in zip(rows, prefix_lens, extend_lens, strict=True):
            out += scene.extend_rows(row, n)
            visible += [scene.table[row, max(0, p + i - window + 1): p + i + 1].tolist()
                        for i in range(n)]
        return scene.forward_batch(mode, rows, prefix_lens, extend_lens, out), visible
    prefix_lens = [1, 17, 40]
    scene.fill_prefixes(rows, prefix_lens)
    if mode is ForwardMode.TARGET_VERIFY:
        parents = random_parents(scene.gen, len(rows), NODES)
        out, visible, positions = [], [], []
        for b, (row, p) in enumerate(zip(rows, prefix_lens, strict=True)):
            slots = scene.extend_rows(row, NODES)
            out += slots
            depth = [0] * NODES
            for i in range(1, NODES):
                depth[i] = depth[int(parents[b, i])] + 1
            for i in range(NODES):
                chain, j = [], i
                while j >= 0:
                    if depth[j] > depth[i] - window:
                        chain.append(slots[j])
                    j = int(parents[b, j])
                first = max(0, p + depth[i] - window + 1)
                visible.append(scene.table[row, first:p].tolist() + sorted(chain))
                positions.append(p + depth[i])
        mask = encode_tree_mask(parents, prefix_lens, mask_mode)
        batch = scene.forward_batch(mode, rows, prefix_lens, [NODES] * 3, out, tree_mask=mask)
        batch.positions = torch.tensor(positions, device=scene.device)
        return batch, visible
    # DRAFT_DECODE: branch rows at position prefix + DEPTH - 1, ancestors just before
    batch, visible = build_case(scene, mode, None)
    assert batch.draft_kv_slots is not None
    kept = []
    for r, slots in enumerate(visible):
        p = prefix_lens[r // BRANCHES]
        query_pos = p + DEPTH - 1
        prefix, own = slots[:p], slots[p:]
        kept.append([s for c, s in enumerate(prefix) if c > query_pos - window]
                    + [s for j, s in enumerate(own) if DEPTH - 1 - j < window])
    batch.positions = torch.tensor([prefix_lens[r // BRANCHES] + DEPTH - 1
                                    for r in range(len(visible))], device=scene.device)
    return batch, kept


def run_forward(scene: PagedScene, attention: Any, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Plan and run layer ``LAYER``; returns (q on the host, the backend's output)."""
    g = scene.geometry
    tokens = batch.num_tokens
    q = torch.randn(tokens, g.num_heads, g.head_dim, generator=scene.gen)
    k, v = scene.random_kv(tokens)
    batch.attn_metadata = attention.plan(batch)
    out = attention.forward(LAYER, *(t.to(scene.device, scene.dtype) for t in (q, k, v)), batch)
    scene.remember(LAYER, batch.out_cache_loc.tolist(), k, v)
    return q, out


def pytest_generate_tests(metafunc: Any) -> None:
    """Page sizes: the standard ones plus those the backend under test requires or prefers."""
    if metafunc.function is test_forward:
        metafunc.parametrize("variant", VARIANTS)
        metafunc.parametrize("page_size", page_size_params(metafunc.config))
        metafunc.parametrize("dtype", DTYPES)


def test_forward(backend: Backend, tolerance: Any, variant: tuple[ForwardMode, str | None],
                 page_size: int, dtype: str) -> None:
    """One forward of ``variant``'s mode equals the dense oracle for every query token."""
    mode, mask_mode = variant
    scene = PagedScene(backend, page_size, dtype,
                       seed=zlib.crc32(f"{mode.value}{mask_mode}{page_size}".encode()))
    attention = scene.attention()
    if mask_mode is not None:
        attention.tree_mask_mode = mask_mode
    batch, visible = build_case(scene, mode, mask_mode)
    q, out = run_forward(scene, attention, batch)
    expected = scene.dense_attention(LAYER, q, visible)
    where = (f"attention {mode.value}{f'[{mask_mode}]' if mask_mode else ''} "
             f"page_size={page_size} {dtype}")
    assert out.dtype == scene.dtype, f"{where}: output dtype {out.dtype}, expected {scene.dtype}"
    assert_close(f"{where}: output [T, H, D]", out, expected, *tolerance(dtype))


@requires("sliding_window")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", WINDOW_VARIANTS)
def test_windowed_forward(backend: Backend, tolerance: Any, mode: ForwardMode,
                          dtype: str) -> None:
    """A forward of layer 1 with a sliding window equals the dense oracle over the keys
    inside the window (layer 0 has none)."""
    _check_capped_or_windowed(backend, tolerance, mode, dtype, WINDOWS[mode], None)


@requires("logit_softcap")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("mode", WINDOW_VARIANTS)
def test_softcapped_forward(backend: Backend, tolerance: Any, mode: ForwardMode,
                            dtype: str) -> None:
    """A forward with soft-capped scores equals the dense oracle with capped scores."""
    _check_capped_or_windowed(backend, tolerance, mode, dtype, None, SOFTCAP)


@requires("sliding_window", "logit_softcap")
@pytest.mark.parametrize("mode", WINDOW_VARIANTS)
def test_windowed_softcapped_forward(backend: Backend, tolerance: Any,
                                     mode: ForwardMode) -> None:
    """Both at once (Gemma 2's local layers), float32."""
    _check_capped_or_windowed(backend, tolerance, mode, "float32", WINDOWS[mode], SOFTCAP)


def _check_capped_or_windowed(backend: Backend, tolerance: Any, mode: ForwardMode, dtype: str,
                              window: int | None, softcap: float | None) -> None:
    # pages of 16 (where taken) put window edges inside pages
    page_size = 16 if backend.capabilities.supports_page_size(16) else preferred_page_size(
        backend)
    scene = PagedScene(backend, page_size, dtype, seed=zlib.crc32(
        f"window{mode.value}{window}{softcap}{page_size}".encode()))
    windows = (None, window) if window is not None else ()
    attention = scene.attention(layer_windows=windows, logit_softcap=softcap)
    mask_mode = backend.capabilities.tree_mask_modes[0]
    attention.tree_mask_mode = mask_mode
    if window is not None:
        batch, visible = build_window_case(scene, mode, mask_mode, window)
    else:
        batch, visible = build_case(scene, mode, mask_mode)
    q, out = run_forward(scene, attention, batch)
    expected = scene.dense_attention(LAYER, q, visible, softcap)
    where = (f"attention {mode.value} window={window} softcap={softcap} "
             f"page_size={page_size} {dtype}")
    assert out.dtype == scene.dtype, f"{where}: output dtype {out.dtype}, expected {scene.dtype}"
    assert_close(f"{where}: output [T, H, D]", out, expected, *tolerance(dtype))
