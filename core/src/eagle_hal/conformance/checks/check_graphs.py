"""Area 5, graphs: capture and replay equal eager, for draft decode, verify and draft extend
attention, for one batch bucket (padding buckets: not yet covered). Skipped (with the reason) on backends that
declare no graph capture.

``init_graph_state``, ``plan_for_capture`` on a batch, a warm-up forward under
``warmup()``, a forward captured under ``capture(graph)``; then for two other batches of the
same shape (other rows, slots, lengths' contents and K/V) the static inputs are refreshed, ``plan_for_replay`` refreshes the
metadata and ``graph.replay()`` runs. The real rows of the static output must equal an
eager ``plan`` + ``forward`` of the same batch on a twin KV store (same tolerances as the
attention area). A replay that reuses stale buffers fails here.
"""

from __future__ import annotations

import zlib
from typing import Any

import pytest
import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.checks.check_attention import build_case
from eagle_hal.conformance.compare import assert_close
from eagle_hal.conformance.paged import PagedScene
from eagle_hal.conformance.requirements import requires
from eagle_hal.hal.attention import ForwardMode

pytestmark = requires("graph_capture")
MODES = [ForwardMode.DRAFT_DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_EXTEND]


def _scene(backend: Backend, mode: ForwardMode, seed: int) -> tuple[PagedScene, Any, list[list[int]]]:
    scene = PagedScene(backend, 1, "float32", seed=seed)
    attention = scene.attention()
    batch, visible = build_case(scene, mode, attention.tree_mask_mode)
    return scene, batch, visible


@pytest.mark.parametrize("mode", MODES, ids=lambda m: m.value)
def test_replay_equals_eager(backend: Backend, tolerance: Any, mode: ForwardMode) -> None:
    """Two different batches replayed through one captured graph equal eager forwards."""
    capture = backend.graph_capture()
    assert capture is not None
    seed = zlib.crc32(mode.value.encode())
    # The capture scene and two replay scenes share shapes (same builder) but not values.
    scene, static_batch, _ = _scene(backend, mode, seed)
    attention = scene.attention()
    g = scene.geometry
    tokens = static_batch.num_tokens
    attention.init_graph_state(max_batch_size=static_batch.batch_size, max_tokens=tokens)
    q = torch.zeros(tokens, g.num_heads, g.head_dim, device=scene.device)
    k = torch.zeros(tokens, g.num_kv_heads, g.head_dim, device=scene.device)
    v = torch.zeros_like(k)
    metadata = attention.plan_for_capture(static_batch)
    static_batch.attn_metadata = metadata
    with capture.warmup():
        attention.forward(1, q, k, v, static_batch)
    graph = capture.new_graph()
    with capture.capture(graph):
        out = attention.forward(1, q, k, v, static_batch)
    for replay in range(2):
        twin, batch, _ = _scene(backend, mode, seed + 1 + replay)  # same shapes, other slots and values
        for layer in range(g.num_layers):  # the captured store now holds the twin's K/V
            scene.store.k_buffer(layer).copy_(twin.store.k_buffer(layer))
            scene.store.v_buffer(layer).copy_(twin.store.v_buffer(layer))
        new_q = torch.randn(tokens, g.num_heads, g.head_dim, generator=twin.gen).to(scene.device)
        new_k, new_v = (t.to(scene.device) for t in twin.random_kv(tokens))
        q.copy_(new_q)
        k.copy_(new_k)
        v.copy_(new_v)
        attention.plan_for_replay(batch, metadata)
        graph.replay()
        backend.synchronize()
        eager_attention = twin.attention()
        batch.attn_metadata = eager_attention.plan(batch)
        expected = eager_attention.forward(1, new_q, new_k, new_v, batch)
        assert_close(f"graph replay {replay} of {mode.value}: output vs eager", out, expected, *tolerance("float32"))
