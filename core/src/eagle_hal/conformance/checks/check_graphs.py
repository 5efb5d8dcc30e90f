"""Area 5, graphs: capture and replay equal eager, for draft decode, verify and draft extend
attention, for one batch bucket (padding buckets: not yet covered), at the backend's own
page size. Skipped (with the reason) on backends that declare no graph capture.

The check drives the hooks as ``engine.graph_runner.GraphRunner`` does (the contract is in
``eagle_hal.hal.attention`` and ``eagle_hal.hal.graphs``): ``init_graph_state``,
``plan_for_capture`` on a static batch, a warm-up forward under ``warmup()``, one forward
recorded with ``record(graph, ...)``. Then for two other batches of the same shape (other
rows, slots, K/V, and prefixes longer than at capture) the request table, the KV store and
every tensor of the static batch are overwritten in place, ``plan_for_replay`` gets the
static batch with the new batch's host lengths, and the graph replays. The static output
must equal an eager ``plan`` + ``forward`` of the new batch on a twin KV store (the
attention area's tolerances). A replay that reads stale buffers or capture-time host
values fails here.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.checks.check_attention import build_case
from eagle_hal.conformance.compare import assert_close
from eagle_hal.conformance.paged import PagedScene, preferred_page_size
from eagle_hal.conformance.requirements import requires
from eagle_hal.hal.attention import ForwardBatch, ForwardMode

pytestmark = requires("graph_capture")
MODES = [ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND]
LAYER = 1
REPLAY_PREFIX_EXTRA = (3, 21)  # replayed prefixes are longer than the captured ones
STATIC_FIELDS = ("input_ids", "positions", "req_pool_indices", "prefix_lens", "extend_lens",
                 "out_cache_loc", "tree_mask", "draft_kv_slots")


def _scene(backend: Backend, mode: ForwardMode, seed: int,
           prefix_extra: int = 0) -> tuple[PagedScene, ForwardBatch]:
    scene = PagedScene(backend, preferred_page_size(backend), "float32", seed=seed)
    batch, _ = build_case(scene, mode, scene.attention().tree_mask_mode, prefix_extra)
    return scene, batch


def _refresh(static: ForwardBatch, batch: ForwardBatch) -> ForwardBatch:
    """Copy ``batch``'s tensors into ``static``'s in place; returns the batch the replay
    hook gets: ``static``'s tensors with ``batch``'s host lengths."""
    for name in STATIC_FIELDS:
        target, source = getattr(static, name), getattr(batch, name)
        assert (target is None) == (source is None), f"{name}: replayed batch differs in kind"
        if target is not None:
            target.copy_(source.reshape(target.shape))
    return dataclasses.replace(static, prefix_lens_cpu=batch.prefix_lens_cpu,
                               extend_lens_cpu=batch.extend_lens_cpu)


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_replay_equals_eager(backend: Backend, tolerance: Any, mode: ForwardMode) -> None:
    """Two different batches replayed through one captured graph equal eager forwards."""
    capture = backend.graph_capture()
    assert capture is not None
    seed = zlib.crc32(mode.value.encode())
    scene, static = _scene(backend, mode, seed)
    attention = scene.attention()
    g = scene.geometry
    tokens = static.num_tokens
    attention.init_graph_state(max_batch_size=static.batch_size, max_tokens=tokens)
    q = torch.zeros(tokens, g.num_heads, g.head_dim, device=scene.device)  # [T, H, D]
    k = torch.zeros(tokens, g.num_kv_heads, g.head_dim, device=scene.device)  # [T, H_kv, D]
    v = torch.zeros_like(k)
    metadata = attention.plan_for_capture(static)
    static.attn_metadata = metadata
    with capture.warmup():
        attention.forward(LAYER, q, k, v, static)
    graph = capture.new_graph()
    out = capture.record(graph, lambda: attention.forward(LAYER, q, k, v, static))
    for replay, extra in enumerate(REPLAY_PREFIX_EXTRA):
        twin, batch = _scene(backend, mode, seed + 1 + replay, extra)
        # What the engine owns is updated in place: the request table, the KV store.
        scene.req_to_token.copy_(twin.req_to_token)
        for layer in range(g.num_layers):
            scene.store.k_buffer(layer).copy_(twin.store.k_buffer(layer))
            scene.store.v_buffer(layer).copy_(twin.store.v_buffer(layer))
        new_q = torch.randn(tokens, g.num_heads, g.head_dim, generator=twin.gen).to(scene.device)
        new_k, new_v = (t.to(scene.device) for t in twin.random_kv(tokens))
        q.copy_(new_q)
        k.copy_(new_k)
        v.copy_(new_v)
        attention.plan_for_replay(_refresh(static, batch), metadata)
        graph.replay()
        backend.synchronize()
        eager_attention = twin.attention()
        batch.attn_metadata = eager_attention.plan(batch)
        expected = eager_attention.forward(LAYER, new_q, new_k, new_v, batch)
        assert_close(f"graph replay {replay} of {mode.value}: output vs eager", out, expected, *tolerance("float32"))
