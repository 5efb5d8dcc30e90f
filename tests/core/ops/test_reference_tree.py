"""Reference tree ops (growth, organisation, verify layout) against brute-force tree walks."""

from __future__ import annotations

import random

import ops_oracle as oracle
import pytest
import torch
from eagle_hal.hal.sampling import TreeConfigError, TreeShape
from eagle_hal.hal.tree_mask import TreeMaskMode

# (batch, topk, steps, num_draft_tokens): chains, N = 1, the largest N, a single step.
TREE_CASES = [
    (1, 1, 1, 1),
    (2, 1, 4, 5),
    (3, 2, 3, 5),
    (2, 3, 3, 10),
    (4, 4, 2, 21),
    (2, 2, 4, 15),
    (1, 5, 3, 12),
    (3, 3, 1, 4),
]


def dyadic(generator: torch.Generator, *shape: int) -> torch.Tensor:
    """Probabilities in eighths: products are exact in float32 and ties are frequent."""
    return torch.randint(0, 9, shape, generator=generator).float() / 8


def grow_random_tree(ops, generator, batch, topk, steps, vocab=50):
    """Run the op's growth on random inputs; return (op steps, per-request raw inputs)."""
    probs = [dyadic(generator, batch, topk)]
    ids = [torch.randint(0, vocab, (batch, topk), generator=generator)]
    grown = [ops.grow_tree_step(probs[0], ids[0], None)]
    for _ in range(1, steps):
        probs.append(dyadic(generator, batch * topk, topk))
        ids.append(torch.randint(0, vocab, (batch * topk, topk), generator=generator))
        grown.append(ops.grow_tree_step(probs[-1], ids[-1], grown[-1]))
    per_request = []
    for b in range(batch):
        p = [probs[0][b].tolist()] + [x.view(batch, topk, topk)[b].tolist() for x in probs[1:]]
        i = [ids[0][b].tolist()] + [x.view(batch, topk, topk)[b].tolist() for x in ids[1:]]
        per_request.append((p, i))
    return grown, per_request


@pytest.mark.parametrize("batch,topk,steps,num_draft_tokens", TREE_CASES)
def test_growth_and_selection_match_oracle(reference_ops, batch, topk, steps, num_draft_tokens):
    """Each step's frontier and the selected drafts equal an explicit Python tree's."""
    generator = torch.Generator().manual_seed(batch * 1000 + topk * 100 + num_draft_tokens)
    grown, per_request = grow_random_tree(reference_ops, generator, batch, topk, steps)
    draft = reference_ops.organize_draft_tree(grown, num_draft_tokens)
    for b, (probs, ids) in enumerate(per_request):
        expected = oracle.grow(probs, ids, topk)
        for step, exp in zip(grown, expected, strict=True):
            assert step.scores[b].tolist() == [c.score for c in exp.frontier]
            assert step.tokens[b].tolist() == [c.token for c in exp.frontier]
            assert step.node_ids[b].tolist() == [c.cand_id for c in exp.frontier]
            assert step.parent_branches[b].tolist() == exp.parent_branches
            assert step.candidate_scores[b].tolist() == [c.score for c in exp.candidates]
            assert step.candidate_tokens[b].tolist() == [c.token for c in exp.candidates]
            assert step.candidate_parents[b].tolist() == [c.parent_id for c in exp.candidates]
        tokens, parents, cand_ids = oracle.organize(expected, num_draft_tokens)
        assert draft.tokens[b].tolist() == tokens
        assert draft.parents[b].tolist() == parents
        assert draft.candidate_ids[b].tolist() == cand_ids


def expected_full_mask(trees: list, seq_lens: list[int]) -> list[bool]:
    flat: list[bool] = []
    for tree, seq_len in zip(trees, seq_lens, strict=True):
        for row in tree.mask_rows():
            flat += [True] * seq_len + row
    return flat


def check_verify_tree(ops, trees, seq_lens):
    """Compare every output of build_verify_tree, in every mask layout, with the trees."""
    root = torch.tensor([t.tokens[0] for t in trees])
    drafts = torch.tensor([t.tokens[1:] for t in trees], dtype=torch.long).view(len(trees), -1)
    parents = torch.tensor([t.parents[1:] for t in trees], dtype=torch.long).view(len(trees), -1)
    seq = torch.tensor(seq_lens)
    num_nodes = trees[0].size
    for mode in TreeMaskMode.ALL:
        if mode == TreeMaskMode.BIT_PACKED and num_nodes > 64:
            continue
        vt = ops.build_verify_tree(root, drafts, parents, seq, mode, sum(seq_lens))
        for b, tree in enumerate(trees):
            nodes = range(tree.size)
            assert vt.tokens[b].tolist() == tree.tokens
            assert vt.positions[b].tolist() == [seq_lens[b] + tree.depth(i) for i in nodes]
            assert vt.retrieve_index[b].tolist() == [b * tree.size + i for i in nodes]
            assert vt.retrieve_next_token[b].tolist() == [tree.next_token(i) for i in nodes]
            assert vt.retrieve_next_sibling[b].tolist() == [tree.next_sibling(i) for i in nodes]
            rows = tree.mask_rows()
            if mode == TreeMaskMode.TREE_BLOCK:
                assert vt.tree_mask[b].tolist() == rows
            elif mode == TreeMaskMode.BIT_PACKED:
                packed = [sum(1 << j for j, seen in enumerate(r) if seen) for r in rows]
                as_unsigned = [v % (1 << 64) for v in vt.tree_mask[b].tolist()]
                assert as_unsigned == packed
        if mode == TreeMaskMode.FULL:
            assert vt.tree_mask.tolist() == expected_full_mask(trees, seq_lens)
    return vt


@pytest.mark.parametrize("batch,topk,steps,num_draft_tokens", TREE_CASES)
def test_verify_tree_from_grown_drafts(reference_ops, batch, topk, steps, num_draft_tokens):
    """The verify layout of selected drafts equals the explicit tree's walk."""
    generator = torch.Generator().manual_seed(7 + num_draft_tokens)
    grown, per_request = grow_random_tree(reference_ops, generator, batch, topk, steps)
    draft = reference_ops.organize_draft_tree(grown, num_draft_tokens)
    trees = []
    for b, (probs, ids) in enumerate(per_request):
        tokens, parents, _ = oracle.organize(oracle.grow(probs, ids, topk), num_draft_tokens)
        trees.append(oracle.Tree([100 + b, *tokens], parents))
        assert draft.parents[b].tolist() == parents
    check_verify_tree(reference_ops, trees, [random.Random(b).randrange(9) for b in range(batch)])


@pytest.mark.parametrize("num_nodes,max_depth", [(1, 1), (2, 1), (9, 3), (33, 6), (64, 5), (70, 4)])
def test_verify_tree_of_random_trees(reference_ops, num_nodes, max_depth):
    """Arbitrary parent-before-child trees (wide, deep, 64 and 70 nodes) lay out correctly."""
    rng = random.Random(num_nodes)
    trees = [oracle.Tree(*oracle.random_tree(rng, num_nodes, max_depth, vocab=90))
             for _ in range(3)]
    check_verify_tree(reference_ops, trees, [0, 5, 17])


def test_chain_degenerates_to_identity_layout(reference_ops):
    """K = 1: every candidate is kept in order and the verify tree is a causal chain."""
    generator = torch.Generator().manual_seed(3)
    grown, _ = grow_random_tree(reference_ops, generator, 2, 1, 5)
    draft = reference_ops.organize_draft_tree(grown, 6)
    assert draft.parents.tolist() == [[0, 1, 2, 3, 4]] * 2
    vt = reference_ops.build_verify_tree(torch.tensor([1, 2]), draft.tokens, draft.parents,
                                         torch.tensor([10, 20]), TreeMaskMode.TREE_BLOCK)
    assert vt.positions.tolist() == [list(range(10, 16)), list(range(20, 26))]
    assert torch.equal(vt.tree_mask[0], torch.ones(6, 6, dtype=torch.bool).tril())


def test_bad_configurations_are_rejected(reference_ops):
    """Too many drafts, over-wide bit masks and missing FULL sizes raise TreeConfigError."""
    with pytest.raises(TreeConfigError, match="candidates"):
        TreeShape(topk=2, num_steps=3, num_draft_tokens=12)  # 2 + 2*4 = 10 candidates
    assert TreeShape(topk=2, num_steps=3, num_draft_tokens=11).max_candidates == 10
    with pytest.raises(TreeConfigError):
        TreeShape(topk=1, num_steps=0, num_draft_tokens=2)
    generator = torch.Generator().manual_seed(0)
    grown, _ = grow_random_tree(reference_ops, generator, 1, 2, 3)
    with pytest.raises(TreeConfigError, match="candidates"):
        reference_ops.organize_draft_tree(grown, 12)
    with pytest.raises(TreeConfigError, match="topk_probs"):
        reference_ops.grow_tree_step(torch.rand(3, 2), torch.zeros(3, 2, dtype=torch.long),
                                     grown[0])
    drafts = torch.zeros(1, 64, dtype=torch.long)
    parents = torch.zeros(1, 64, dtype=torch.long)
    with pytest.raises(TreeConfigError, match="64"):
        reference_ops.build_verify_tree(torch.zeros(1), drafts, parents, torch.zeros(1),
                                        TreeMaskMode.BIT_PACKED)
    with pytest.raises(TreeConfigError, match="seq_lens_sum"):
        reference_ops.build_verify_tree(torch.zeros(1), drafts, parents, torch.zeros(1),
                                        TreeMaskMode.FULL)
    with pytest.raises(TreeConfigError, match="unknown"):
        reference_ops.build_verify_tree(torch.zeros(1), drafts, parents, torch.zeros(1), "dense")
