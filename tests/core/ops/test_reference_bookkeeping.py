"""Reference bookkeeping ops (bonus fill, compaction, KV slots) against plain-Python loops."""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.hal.sampling import NO_NODE, NO_TOKEN, TreeConfigError


def random_acceptance(rng: random.Random, batch: int, num_nodes: int, width: int):
    """Random increasing accepted paths (root first), padded with NO_NODE."""
    accepted, lens = [], []
    for _ in range(batch):
        length = rng.randint(1, min(width, num_nodes))
        path = [0] + sorted(rng.sample(range(1, num_nodes), length - 1))
        accepted.append(path + [NO_NODE] * (width - length))
        lens.append(length)
    return torch.tensor(accepted), torch.tensor(lens)


@pytest.mark.parametrize("batch,num_nodes,width", [(1, 1, 1), (3, 4, 4), (5, 8, 4), (4, 3, 6)])
def test_fill_bonus_and_compaction(reference_ops, batch, num_nodes, width):
    """Emitted tokens, the hidden gather and the KV move put the path at the front."""
    rng = random.Random(batch * 10 + num_nodes)
    tokens = torch.randint(0, 1000, (batch, num_nodes), generator=torch.Generator().manual_seed(1))
    accepted, lens = random_acceptance(rng, batch, num_nodes, width)
    bonus = torch.randint(0, 1000, (batch,), generator=torch.Generator().manual_seed(2))
    slots = torch.stack([torch.randperm(50, generator=torch.Generator().manual_seed(b))[:num_nodes]
                         for b in range(batch)])  # [B, N] distinct slots per request
    emitted = reference_ops.fill_bonus_tokens(tokens, accepted, lens, bonus)
    path = reference_ops.compact_accepted(tokens, accepted, lens, slots)
    for b in range(batch):
        nodes = accepted[b].tolist()[: lens[b]]
        drafts = [tokens[b, n].item() for n in nodes[1:]]
        assert emitted[b].tolist() == drafts + [bonus[b].item()] + [NO_TOKEN] * (width - lens[b])
        assert path.tokens[b].tolist()[: lens[b]] == [tokens[b, n].item() for n in nodes]
        assert set(path.tokens[b].tolist()[lens[b]:]) <= {NO_TOKEN}
        hidden = path.hidden_index[b].tolist()
        assert hidden == [b * num_nodes + n for n in nodes] + [hidden[lens[b] - 1]] * (
            width - lens[b])
        # Simulate the move: node i's KV sits in slot slots[b, i]; read all, then write.
        kv = {slots[b, i].item(): f"kv{i}" for i in range(num_nodes)}
        moved = [kv[s] for s in path.kv_source[b].tolist()]
        for destination, value in zip(path.kv_destination[b].tolist(), moved, strict=True):
            kv[destination] = value
        for j, node in enumerate(nodes):  # position seq_len + j now holds path entry j
            assert kv[slots[b, j].item()] == f"kv{node}"
        assert path.free_mask[b].tolist() == [i >= lens[b] for i in range(num_nodes)]


def test_assign_verify_slots_writes_the_table(reference_ops):
    """Slot i of request b lands at req_to_token[pool[b], seq_len[b] + i]."""
    table = torch.zeros(6, 20, dtype=torch.int32)
    pool, seq_lens = [4, 0, 2], [3, 0, 12]
    out_cache_loc = torch.arange(100, 100 + 3 * 5)
    reference_ops.assign_verify_slots(table, torch.tensor(pool), torch.tensor(seq_lens),
                                      out_cache_loc)
    expected = [[0] * 20 for _ in range(6)]
    for b in range(3):
        for i in range(5):
            expected[pool[b]][seq_lens[b] + i] = 100 + b * 5 + i
    assert table.tolist() == expected
    with pytest.raises(TreeConfigError):
        reference_ops.assign_verify_slots(table, torch.tensor(pool), torch.tensor(seq_lens),
                                          torch.arange(7))


@pytest.mark.parametrize("batch,steps,topk", [(1, 1, 1), (2, 4, 1), (3, 4, 3), (2, 5, 4)])
def test_draft_kv_slots_follow_ancestors(reference_ops, batch, steps, topk):
    """Each branch row lists its ancestors' scratch slots (depth 1 first), then its own."""
    generator = torch.Generator().manual_seed(steps * topk)
    scratch = torch.randperm(batch * steps * topk, generator=generator).view(batch, steps, topk)
    parent_branches = [torch.zeros(batch, topk, dtype=torch.long)] + [
        torch.randint(0, topk, (batch, topk), generator=generator) for _ in range(1, steps)]
    for step in range(steps):
        slots = reference_ops.draft_kv_slots(scratch, parent_branches, step)
        for b in range(batch):
            for k in range(topk):
                lineage = [k]  # branch index at depth step + 1, step, ..., 1
                for depth_index in range(step, 0, -1):
                    lineage.append(parent_branches[depth_index][b, lineage[-1]].item())
                lineage.reverse()
                expected = [scratch[b, d, lineage[d]].item() for d in range(step + 1)]
                assert slots[b * topk + k].tolist() == expected
    with pytest.raises(TreeConfigError):
        reference_ops.draft_kv_slots(scratch, parent_branches, steps)
