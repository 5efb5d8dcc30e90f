"""split_paged_attention (``ops/triton/attention_split``, running the kernels of
``attention_split_kernels``) against a float64 recomputation over exactly the slots each
mode's definition (``eagle_hal.hal.attention``) lets a token see, and its KV write against
the store it replaces; the split count it chooses.

Scenes (``paged_attention_scene``) come from the engine's own page allocator and token
table at page sizes 1, 16 and 128, with the free pages shuffled so a request's pages are
scattered. Key blocks of 16 and explicit split counts make small contexts cover every case
of the split arithmetic: empty splits, contexts shorter than one split or one block,
lengths that are no multiple of the block, own runs straddling two splits. Kernels run
interpreted on CPU (TRITON_INTERPRET=1, set by conftest) or on the device.
"""

from __future__ import annotations

import pytest
import torch

kernels = pytest.importorskip("eagle_hal.ops.triton.attention_split")

from paged_attention_scene import Scene, causal_case  # noqa: E402


@pytest.mark.parametrize("num_splits", [1, 4])
@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_decode_ragged_contexts(page_size, num_splits):
    """Decode over prefixes from empty to several splits long, none a multiple of a block."""
    scene = Scene(page_size=page_size, seed=page_size + num_splits)
    plan, visible = causal_case(scene, [0, 5, 37, 150], [1, 1, 1, 1])
    q, k, v = scene.randn(4, 6, 16), scene.randn(4, 2, 16), scene.randn(4, 2, 16)
    out = scene.run(q, k, v, num_splits=num_splits, **plan)
    scene.check(out, q, visible)


@pytest.mark.parametrize("heads,kv_heads,head_dim", [(4, 1, 16), (2, 2, 8), (8, 2, 12)])
def test_decode_batch_of_one_head_groups(heads, kv_heads, head_dim):
    """Batch 1 with more splits than the context has blocks; GQA groups of 4, 1 (MHA) and 4,
    head dims below and off a power of two."""
    scene = Scene(heads=heads, kv_heads=kv_heads, head_dim=head_dim, seed=heads)
    plan, visible = causal_case(scene, [70], [1])
    q = scene.randn(1, heads, head_dim)
    k, v = scene.randn(1, kv_heads, head_dim), scene.randn(1, kv_heads, head_dim)
    out = scene.run(q, k, v, num_splits=8, **plan)
    scene.check(out, q, visible)


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_ragged_extend(order):
    """Causal extends of several tokens per request (the own run read from the inputs)."""
    scene = Scene(order=order, page_size=16, seed=7)
    extend = [9, 1, 20]
    plan, visible = causal_case(scene, [0, 33, 12], extend)
    tokens = sum(extend)
    q, k, v = scene.randn(tokens, 6, 16), scene.randn(tokens, 2, 16), scene.randn(tokens, 2, 16)
    out = scene.run(q, k, v, num_splits=3, **plan)
    scene.check(out, q, visible)


def random_tree_mask(gen: torch.Generator, batch: int, n: int) -> torch.Tensor:
    """``[B, N, N]`` bool: node ``i`` sees its ancestors and itself in a random tree."""
    mask = torch.zeros(batch, n, n, dtype=torch.bool)
    for b in range(batch):
        parents = [-1] + [int(torch.randint(0, j, (1,), generator=gen)) for j in range(1, n)]
        for i in range(n):
            node = i
            while node >= 0:
                mask[b, i, node] = True
                node = parents[node]
    return mask


@pytest.mark.parametrize("num_splits", [1, 3])
@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_target_verify_tree_mask(page_size, num_splits):
    """N tree tokens per request see the prefix and their tree ancestors only."""
    scene = Scene(page_size=page_size, seed=20 + page_size + num_splits)
    prefix, n = [3, 40, 17], 6
    rows = scene.add_requests([p + n for p in prefix])
    mask = random_tree_mask(scene.gen, len(rows), n)
    out_cache_loc, token_request, own_base, own_len, visible = [], [], [], [], []
    for b, (row, p) in enumerate(zip(rows, prefix, strict=False)):
        tree_slots = scene.slots(row, p, p + n)
        out_cache_loc += tree_slots
        for i in range(n):
            token_request.append(b)
            own_base.append(b * n)
            own_len.append(n)
            seen = [s for j, s in enumerate(tree_slots) if mask[b, i, j]]
            visible.append(scene.slots(row, 0, p) + seen)
    tokens = len(visible)
    q, k, v = scene.randn(tokens, 6, 16), scene.randn(tokens, 2, 16), scene.randn(tokens, 2, 16)
    out = scene.run(q, k, v, out_cache_loc, rows, prefix, token_request, own_base, own_len,
                    num_splits, tree_mask=mask.to(scene.dev), tree_width=n)
    scene.check(out, q, visible)


@pytest.mark.parametrize("depth", [1, 3])
@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_draft_decode_ancestors(page_size, depth):
    """K branches per request: each sees the prefix, its cached ancestors, then itself."""
    scene = Scene(page_size=page_size, seed=40 + page_size + depth)
    prefix, branches = [6, 45], 3
    rows = scene.add_requests([p + branches * depth for p in prefix])
    out_cache_loc, ancestor_slots, token_request, own_base, own_len = [], [], [], [], []
    visible = []
    for b, (row, p) in enumerate(zip(rows, prefix, strict=False)):
        scratch = scene.slots(row, p, p + branches * depth)
        order = torch.randperm(len(scratch), generator=scene.gen).tolist()
        for branch in range(branches):
            path = [scratch[i] for i in order[branch * depth : (branch + 1) * depth]]
            token = len(token_request)
            token_request.append(b)
            own_base.append(token * depth)
            own_len.append(depth)
            ancestor_slots += path
            out_cache_loc.append(path[-1])
            visible.append(scene.slots(row, 0, p) + path)
    tokens = len(visible)
    q, k, v = scene.randn(tokens, 6, 16), scene.randn(tokens, 2, 16), scene.randn(tokens, 2, 16)
    out = scene.run(q, k, v, out_cache_loc, rows, prefix, token_request, own_base, own_len,
                    num_splits=2, ancestor_slots=ancestor_slots)
    scene.check(out, q, visible)


@pytest.mark.parametrize("order", ["NHD", "HND"])
def test_writes_kv_at_out_cache_loc_only(order):
    """The new K/V land at out_cache_loc in the store's layout (read from strided views of a
    fused projection); every other slot keeps its value."""
    scene = Scene(order=order, page_size=16, seed=60)
    plan, _ = causal_case(scene, [4, 21], [3, 2])
    qkv = scene.randn(5, (6 + 2 + 2) * 16)
    q, k, v = (x.view(5, -1, 16) for x in qkv.split([6 * 16, 2 * 16, 2 * 16], dim=1))
    before = [scene.store.k_buffer(0).clone(), scene.store.v_buffer(0).clone()]
    scene.run(q, k, v, num_splits=2, **plan)
    got_k, got_v = scene.kv_rows(plan["out_cache_loc"])
    torch.testing.assert_close(got_k, k, atol=0, rtol=0)
    torch.testing.assert_close(got_v, v, atol=0, rtol=0)
    slot_axis = 0 if order == "NHD" else 1
    others = torch.ones(scene.store.num_slots, dtype=torch.bool)
    others[plan["out_cache_loc"]] = False
    index = others.nonzero().squeeze(1).to(scene.dev)
    for old, new in zip(before, (scene.store.k_buffer(0), scene.store.v_buffer(0)), strict=False):
        assert torch.equal(new.index_select(slot_axis, index), old.index_select(slot_axis, index))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_decode(dtype):
    """16-bit storage and activations: 16-bit dot operands (float32 ones for bfloat16 when
    interpreted), float32 softmax; output in q's dtype."""
    scene = Scene(dtype=dtype, seed=70)
    plan, visible = causal_case(scene, [90, 2], [1, 1])
    q, k, v = scene.randn(2, 6, 16), scene.randn(2, 2, 16), scene.randn(2, 2, 16)
    out = scene.run(q, k, v, num_splits=3, **plan)
    assert out.dtype == dtype
    scene.check(out, q, visible)


def test_num_splits_follow_static_shapes():
    """Few tokens get many splits (capped, and never more than the table has blocks); many
    tokens get one; always a power of two, so every token count compiles one of six."""
    choose, block = kernels.choose_num_splits, kernels.BLOCK_KEYS
    assert choose(1, 3, 4096) == 32
    assert choose(1, 3, 4 * block) == 4
    assert choose(1, 3, 5 * block) == 4
    assert choose(64, 3, 4096) == 2  # 512 / 192 programs, rounded down
    assert choose(1024, 3, 4096) == 1
    assert choose(0, 3, 4096) >= 1
    counts = {choose(tokens, 3, 4096) for tokens in range(1, 2049)}
    assert counts == {1, 2, 4, 8, 16, 32}

def test_rejects_mismatched_kv():
    """k and v must match each other and q's tokens and head size."""
    scene = Scene()
    plan, _ = causal_case(scene, [3], [1])
    q, k = scene.randn(1, 6, 16), scene.randn(1, 2, 16)
    with pytest.raises(ValueError, match="must both be"):
        scene.run(q, k, scene.randn(1, 2, 8), num_splits=1, **plan)
