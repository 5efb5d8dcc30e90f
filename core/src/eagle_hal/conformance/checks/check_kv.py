"""Area 5, KV write and move: the backend's attention writes K/V where ``out_cache_loc``
says, in its declared layout, and moves of the accepted path (``compact_accepted`` then
``KVStorage.move_kv``) on its device put each accepted node's K/V at its new position.
Oracle: explicit per-slot bookkeeping on the host."""

from __future__ import annotations

from typing import Any

import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.compare import assert_same
from eagle_hal.conformance.paged import PagedScene, page_size_params
from eagle_hal.hal.attention import ForwardMode


def pytest_generate_tests(metafunc: Any) -> None:
    """Page sizes: the standard ones plus those the backend under test requires or prefers."""
    if "page_size" in metafunc.fixturenames:
        metafunc.parametrize("page_size", page_size_params(metafunc.config))


def _read(scene: PagedScene, layer: int, slots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    index = torch.tensor(slots, device=scene.device)
    k, v = scene.store.k_buffer(layer), scene.store.v_buffer(layer)
    if scene.layout.order == "HND":
        return k[:, index].transpose(0, 1), v[:, index].transpose(0, 1)
    return k[index], v[index]


def _expected(scene: PagedScene, layer: int, slots: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    return (torch.stack([scene.kv[(layer, s)][0] for s in slots]).to(scene.dtype),
            torch.stack([scene.kv[(layer, s)][1] for s in slots]).to(scene.dtype))


def test_forward_writes_kv(backend: Backend, page_size: int) -> None:
    """After an EXTEND forward, every layer-1 slot of out_cache_loc holds the new K/V and no
    other slot changed."""
    scene = PagedScene(backend, page_size, "float32", seed=page_size)
    attention = scene.attention()
    rows = scene.rows[:2]
    scene.fill_prefixes(rows, [3, 20])
    before = [s.clone() for s in (scene.store.k_buffer(1), scene.store.v_buffer(1))]
    out = scene.extend_rows(rows[0], 5) + scene.extend_rows(rows[1], 2)
    batch = scene.forward_batch(ForwardMode.EXTEND, rows, [3, 20], [5, 2], out)
    g = scene.geometry
    q = torch.randn(7, g.num_heads, g.head_dim, generator=scene.gen)
    k, v = scene.random_kv(7)
    batch.attn_metadata = attention.plan(batch)
    attention.forward(1, *(t.to(scene.device) for t in (q, k, v)), batch)
    scene.remember(1, out, k, v)
    got_k, got_v = _read(scene, 1, out)
    exp_k, exp_v = _expected(scene, 1, out)
    assert_same("write_kv: K at out_cache_loc", got_k, exp_k)
    assert_same("write_kv: V at out_cache_loc", got_v, exp_v)
    after = (scene.store.k_buffer(1), scene.store.v_buffer(1))
    slot_axis = 0 if scene.layout.order == "NHD" else 1
    untouched = torch.ones(after[0].shape[slot_axis], dtype=torch.bool)
    untouched[out] = False
    for name, old, new in zip("KV", before, after, strict=True):
        index = untouched.nonzero().squeeze(1).to(scene.device)
        assert_same(f"write_kv: {name} outside out_cache_loc", new.index_select(slot_axis, index),
                    old.index_select(slot_axis, index))


def test_accepted_path_move(backend: Backend, ops: Any, page_size: int) -> None:
    """compact_accepted + move_kv: accepted node j's K/V lands at position seq_len + j."""
    scene = PagedScene(backend, page_size, "float32", seed=10 + page_size)
    nodes, rows = 6, scene.rows[:3]
    seq_lens = [4, 1, 9]
    scene.fill_prefixes(rows, seq_lens)
    verify_slots = [scene.extend_rows(row, nodes) for row in rows]
    for layer in range(scene.geometry.num_layers):
        scene.write(layer, sum(verify_slots, []), *scene.random_kv(3 * nodes))
    # Accepted paths (root first): a chain, a branch, only the root.
    accepted = torch.tensor([[0, 1, 3, 5], [0, 2, -1, -1], [0, -1, -1, -1]])
    lens = torch.tensor([4, 2, 1])  # emitted tokens = accepted drafts + bonus
    tokens = torch.arange(3 * nodes).view(3, nodes)
    device = scene.device
    path = ops.compact_accepted(tokens.to(device), accepted.to(device), lens.to(device),
                                torch.tensor(verify_slots, device=device))
    src, dst = path.kv_source.reshape(-1), path.kv_destination.reshape(-1)
    scene.store.move_kv(src, dst)
    for layer in range(scene.geometry.num_layers):
        for b, row in enumerate(rows):
            for j, node in enumerate(accepted[b].tolist()):
                if node < 0:
                    break
                target_slot = int(scene.table[row, seq_lens[b] + j])
                got_k, got_v = _read(scene, layer, [target_slot])
                exp_k, exp_v = _expected(scene, layer, [verify_slots[b][node]])
                assert_same(f"move_kv layer {layer} request {b} path entry {j}: K", got_k, exp_k)
                assert_same(f"move_kv layer {layer} request {b} path entry {j}: V", got_v, exp_v)
