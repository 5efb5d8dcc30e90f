"""``speculative.drafting.chain_layout``: a chain's verify tree written out directly equals what
``build_verify_tree`` (the reference, an independent construction from parent links) lays
out for it, with and without the cache of its shape-only parts, and the cached parts are
shared, not rebuilt."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.reference import ReferenceSamplingOps
from eagle_hal.speculative.drafting import chain_layout

FIELDS = ("tokens", "positions", "retrieve_index", "retrieve_next_token",
          "retrieve_next_sibling", "tree_mask")


@pytest.mark.parametrize("mask_mode", [TreeMaskMode.TREE_BLOCK, TreeMaskMode.BIT_PACKED])
@pytest.mark.parametrize(("batch", "steps"), [(1, 1), (1, 5), (3, 4), (4, 7)])
def test_chain_layout_equals_the_reference_tree(mask_mode: str, batch: int, steps: int) -> None:
    generator = torch.Generator().manual_seed(batch * 10 + steps)
    cache: dict[object, tuple[torch.Tensor, ...]] = {}
    for _ in range(2):  # the second call reads the cache
        roots = torch.randint(0, 1000, (batch,), generator=generator)
        chain = torch.randint(0, 1000, (batch, steps), generator=generator)
        seq_lens = torch.randint(1, 300, (batch,), generator=generator)
        parents = torch.arange(steps).expand(batch, steps)  # draft node i hangs off node i
        expected = ReferenceSamplingOps().build_verify_tree(roots, chain, parents, seq_lens,
                                                             mask_mode)
        for got in (chain_layout(roots, chain, seq_lens, mask_mode),
                    chain_layout(roots, chain, seq_lens, mask_mode, cache)):
            for field in FIELDS:
                assert torch.equal(getattr(got, field), getattr(expected, field)), field
    assert len(cache) == 1


def test_chain_layout_reuses_its_shape_parts() -> None:
    cache: dict[object, tuple[torch.Tensor, ...]] = {}
    first = chain_layout(torch.tensor([1, 2]), torch.tensor([[3, 4], [5, 6]]),
                         torch.tensor([7, 8]), TreeMaskMode.TREE_BLOCK, cache)
    second = chain_layout(torch.tensor([9, 9]), torch.tensor([[9, 9], [9, 9]]),
                          torch.tensor([1, 1]), TreeMaskMode.TREE_BLOCK, cache)
    assert second.tree_mask.data_ptr() == first.tree_mask.data_ptr()
    assert second.retrieve_index.data_ptr() == first.retrieve_index.data_ptr()
    assert second.tokens.tolist() == [[9, 9, 9], [9, 9, 9]]
    assert second.positions.tolist() == [[1, 2, 3], [1, 2, 3]]
    with pytest.raises(ValueError, match="FULL"):
        chain_layout(torch.tensor([1]), torch.tensor([[2]]), torch.tensor([3]),
                     TreeMaskMode.FULL, cache)
