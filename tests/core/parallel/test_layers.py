"""Sharded layers split a weight so that the ranks' parts recombine into the whole.

Oracle: the unsharded ``torch.nn.functional`` computation and explicit slicing of the full
weight. No process group is needed: each rank's module is built with a context of that
rank, and the cross-rank sum / concatenation a collective would do is done here by hand.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from eagle_hal.parallel import (
    ColumnParallelLinear,
    ParallelContext,
    RowParallelLinear,
    ShardingError,
    ShardSpec,
    VocabParallelEmbedding,
    VocabParallelLMHead,
    sharded_parameters,
)

WORLD = 2


def _context(rank: int, world: int = WORLD) -> ParallelContext:
    return ParallelContext(rank=rank, world_size=world, group=object())  # no collective is called


def _load(module: torch.nn.Module, full: dict[str, torch.Tensor]) -> None:
    specs = module.shard_specs()
    with torch.no_grad():
        for name, param in module.named_parameters():
            value = full[name]
            param.copy_(specs[name].take(value) if name in specs else value)


@pytest.mark.parametrize("full_size,world", [(8, 2), (61, 2), (61, 4), (5, 8), (12, 3)])
def test_shard_spec_padded_slices_tile_the_full_range(full_size, world):
    """Padded shards are equal-sized, in rank order, and concatenate to full + zero rows."""
    full = torch.arange(full_size * 3, dtype=torch.float32).view(full_size, 3)
    parts = [ShardSpec.split(0, full_size, _context(r, world), pad=True).take(full)
             for r in range(world)]
    size = -(-full_size // world)
    assert all(p.shape == (size, 3) for p in parts)
    joined = torch.cat(parts)
    assert torch.equal(joined[:full_size], full)
    assert torch.count_nonzero(joined[full_size:]) == 0


def test_shard_spec_index_matches_take():
    """The lazy-reader index selects exactly the unpadded part ``take`` returns."""
    full = torch.randn(7, 10)
    for rank in range(WORLD):
        spec = ShardSpec.split(1, 10, _context(rank))
        assert torch.equal(full[spec.index(2)], spec.take(full))
        assert torch.equal(spec.take(full), full[:, 5 * rank : 5 * rank + 5])


def test_unpadded_split_refuses_an_uneven_size():
    with pytest.raises(ShardingError, match="not divisible"):
        ShardSpec.split(0, 7, _context(0))


class _LocalCollectives:
    """Collectives that keep only the running rank's contribution (the others count as
    zero), so a test sums the ranks' outputs itself: all_reduce is the identity and
    all_gather zero-fills every part but ``rank``'s."""

    rank = 0

    def all_reduce(self, tensor, group=None):
        return None

    def all_gather(self, parts, tensor, group=None):
        for part in parts:
            part.zero_()
        parts[self.rank].copy_(tensor)


@pytest.fixture
def local_collectives(monkeypatch):
    import torch.distributed as dist

    fake = _LocalCollectives()
    monkeypatch.setattr(dist, "all_reduce", fake.all_reduce)
    monkeypatch.setattr(dist, "all_gather", fake.all_gather)
    return fake


def test_column_then_row_parallel_recombine_to_the_full_mlp(local_collectives):
    """gate/up by columns, down by rows: the sum of rank partials is the full SwiGLU MLP."""
    gen = torch.Generator().manual_seed(0)
    hidden, inner = 12, 16
    weights = {k: torch.randn(s, generator=gen) for k, s in
               (("gate", (inner, hidden)), ("up", (inner, hidden)), ("down", (hidden, inner)))}
    bias = torch.randn(hidden, generator=gen)
    x = torch.randn(5, hidden, generator=gen)
    expected = F.linear(F.silu(F.linear(x, weights["gate"])) * F.linear(x, weights["up"]),
                        weights["down"], bias)
    partials = []
    for rank in range(WORLD):
        context = _context(rank)
        gate = ColumnParallelLinear(hidden, inner, False, context)
        up = ColumnParallelLinear(hidden, inner, False, context)
        down = RowParallelLinear(inner, hidden, True, context)
        _load(gate, {"weight": weights["gate"]})
        _load(up, {"weight": weights["up"]})
        _load(down, {"weight": weights["down"], "bias": bias})
        with torch.no_grad():
            partials.append(down(F.silu(gate(x)) * up(x)) - bias)  # this rank's share
    torch.testing.assert_close(sum(partials) + bias, expected, rtol=1e-5, atol=1e-5)


def test_column_parallel_bias_is_sharded_with_its_rows():
    """A biased column-parallel layer (Qwen2's Q/K/V) gives each rank its rows of x W^T + b."""
    gen = torch.Generator().manual_seed(1)
    weight, bias, x = (torch.randn(8, 6, generator=gen), torch.randn(8, generator=gen),
                       torch.randn(3, 6, generator=gen))
    outputs = []
    for rank in range(WORLD):
        layer = ColumnParallelLinear(6, 8, True, _context(rank))
        _load(layer, {"weight": weight, "bias": bias})
        with torch.no_grad():
            outputs.append(layer(x))
    torch.testing.assert_close(torch.cat(outputs, dim=-1), F.linear(x, weight, bias))


@pytest.mark.parametrize("world", [2, 4])
def test_vocab_parallel_embedding_and_head_cover_an_odd_vocabulary(local_collectives, world):
    """Vocabulary 61: the rank sums of embeddings are exactly the full embedding, the
    gathered logits (padding cut) the full logits."""
    gen = torch.Generator().manual_seed(2)
    table = torch.randn(61, 8, generator=gen)
    ids = torch.tensor([0, 15, 16, 30, 31, 60, 7])
    hidden = torch.randn(4, 8, generator=gen)
    embeds, logits = [], []
    for rank in range(world):
        local_collectives.rank = rank
        context = _context(rank, world)
        embedding = VocabParallelEmbedding(61, 8, context)
        head = VocabParallelLMHead(8, 61, context)
        _load(embedding, {"weight": table})
        _load(head, {"weight": table})
        with torch.no_grad():
            embeds.append(embedding(ids))
            logits.append(head(hidden))
    assert torch.equal(sum(embeds), table[ids])
    assert all(part.shape == (4, 61) for part in logits)
    torch.testing.assert_close(sum(logits), hidden @ table.T)


@pytest.mark.parametrize("world", [2, 3])
def test_vocab_parallel_head_gives_the_full_rows_of_a_draft_vocabulary(local_collectives, world):
    """``rows(ids)`` over the ranks (each contributing its shard to the gather) is the full
    table's rows, ids on every shard and the last, padded one included."""
    table = torch.randn(61, 8, generator=torch.Generator().manual_seed(3))
    ids = torch.tensor([60, 0, 31, 15, 16, 44])
    gathered = []
    for rank in range(world):
        local_collectives.rank = rank
        head = VocabParallelLMHead(8, 61, _context(rank, world))
        _load(head, {"weight": table})
        gathered.append(head.rows(ids))
    assert torch.equal(sum(gathered), table[ids])


def test_sharded_parameters_names_every_split_weight():
    """``sharded_parameters`` lists each parallel module's parameters by full name."""
    module = torch.nn.Module()
    module.proj = ColumnParallelLinear(4, 6, True, _context(0))
    module.out = RowParallelLinear(6, 4, True, _context(0))
    specs = sharded_parameters(module)
    assert set(specs) == {"proj.weight", "proj.bias", "out.weight"}
    assert specs["out.weight"].dim == 1 and specs["proj.bias"].dim == 0
