"""Reference acceptance ops: hand-written golden vectors and brute-force path enumeration."""

from __future__ import annotations

import random

import ops_oracle as oracle
import pytest
import torch
from eagle_hal.hal.sampling import NO_NODE, SamplingNoise, TreeConfigError

# A hand-drawn tree:      0 (10)
#                        /      \
#                    1 (11)    2 (12)
#                    /    \        \
#                 3 (13)  4 (14)   5 (15)
#                           |
#                         6 (16)
GOLDEN_TOKENS = [10, 11, 12, 13, 14, 15, 16]
GOLDEN_NEXT_TOKEN = [1, 3, 5, NO_NODE, 6, NO_NODE, NO_NODE]
GOLDEN_NEXT_SIBLING = [NO_NODE, 2, NO_NODE, 4, NO_NODE, NO_NODE, NO_NODE]
# (target argmax per node, num_steps) -> (accepted nodes, accept_len, bonus), worked by hand.
GOLDEN_GREEDY = [
    ([12, 0, 15, 0, 0, 99, 0], 3, [0, 2, 5, NO_NODE], 3, 99),
    ([11, 14, 0, 0, 16, 0, 77], 3, [0, 1, 4, 6], 4, 77),
    ([11, 14, 0, 0, 16, 0, 77], 2, [0, 1, 4], 3, 16),
    ([50, 13, 15, 0, 0, 0, 0], 3, [0, NO_NODE, NO_NODE, NO_NODE], 1, 50),
    ([11, 13, 15, 42, 0, 0, 0], 3, [0, 1, 3, NO_NODE], 3, 42),
    ([11, 13, 15, 42, 0, 0, 0], 0, [0], 1, 11),
]


@pytest.mark.parametrize("predict,num_steps,accepted,accept_len,bonus", GOLDEN_GREEDY)
def test_greedy_golden_vectors(reference_ops, predict, num_steps, accepted, accept_len, bonus):
    """Greedy verification of a hand-drawn tree gives the hand-worked answers."""
    result = reference_ops.verify_greedy(
        torch.tensor([GOLDEN_TOKENS]), torch.tensor([GOLDEN_NEXT_TOKEN]),
        torch.tensor([GOLDEN_NEXT_SIBLING]), torch.tensor([predict]), num_steps,
    )
    assert result.accepted_nodes.tolist() == [accepted]
    assert result.accept_lens.tolist() == [accept_len]
    assert result.bonus_tokens.tolist() == [bonus]


def test_greedy_takes_first_of_duplicate_siblings(reference_ops):
    """With two siblings carrying the target's token, the first in sibling order wins."""
    tokens = [[10, 11, 11, 13, 14]]  # nodes 1 and 2 both carry 11; 3 under 1, 4 under 2
    result = reference_ops.verify_greedy(
        torch.tensor(tokens), torch.tensor([[1, 3, 4, NO_NODE, NO_NODE]]),
        torch.tensor([[NO_NODE, 2, NO_NODE, NO_NODE, NO_NODE]]),
        torch.tensor([[11, 13, 14, 5, 6]]), 2,
    )
    assert result.accepted_nodes.tolist() == [[0, 1, 3]]
    assert result.bonus_tokens.tolist() == [5]


def tree_tensors(trees: list[oracle.Tree]):
    tokens = torch.tensor([t.tokens for t in trees])
    next_token = torch.tensor([[t.next_token(i) for i in range(t.size)] for t in trees])
    next_sibling = torch.tensor([[t.next_sibling(i) for i in range(t.size)] for t in trees])
    return tokens, next_token, next_sibling


@pytest.mark.parametrize("batch,num_nodes,depth", [(1, 1, 1), (4, 2, 1), (6, 8, 3), (5, 17, 5),
                                                   (3, 40, 8), (8, 64, 6)])
def test_greedy_matches_path_enumeration(reference_ops, batch, num_nodes, depth):
    """On random trees, the accepted path is the longest fully matching root path."""
    rng = random.Random(num_nodes * 31 + depth)
    vocab = 64
    trees = [oracle.Tree(*oracle.random_tree(rng, num_nodes, depth, vocab)) for _ in range(batch)]
    predicts = [oracle.random_predictions(rng, t, vocab) for t in trees]
    for num_steps in sorted({depth, max(depth - 1, 0)}):
        result = reference_ops.verify_greedy(*tree_tensors(trees), torch.tensor(predicts),
                                             num_steps)
        for b, tree in enumerate(trees):
            path, bonus = oracle.greedy_accept(tree, predicts[b], num_steps)
            padded = path + [NO_NODE] * (num_steps + 1 - len(path))
            assert result.accepted_nodes[b].tolist() == padded
            assert result.accept_lens[b].item() == len(path)
            assert result.bonus_tokens[b].item() == bonus


@pytest.mark.parametrize("vocab,padded", [(1, 1), (7, 7), (7, 16), (1000, 1024)])
def test_masked_argmax_ignores_padded_tail(reference_ops, vocab, padded):
    """The argmax over a padded vocabulary is the first maximum of the real part."""
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randint(-5, 5, (3, 2, padded), generator=generator).float()
    logits[..., vocab:] = 100.0  # a padded tail that must never win
    result = reference_ops.masked_argmax(logits, vocab)
    for index in [(i, j) for i in range(3) for j in range(2)]:
        row = logits[index].tolist()[:vocab]
        assert result[index].item() == row.index(max(row))
    bf16 = reference_ops.masked_argmax(logits.bfloat16(), vocab)
    assert torch.equal(bf16, result)
    with pytest.raises(TreeConfigError):
        reference_ops.masked_argmax(logits, padded + 1)


def test_zero_temperature_sampling_is_greedy(reference_ops):
    """Temperature-0 requests in a mixed batch take exactly the greedy path and bonus."""
    rng = random.Random(5)
    vocab, padded, num_nodes, depth = 6, 8, 9, 3
    trees = [oracle.Tree(*oracle.random_tree(rng, num_nodes, depth, vocab)) for _ in range(6)]
    logits = torch.randn(6, num_nodes, padded, generator=torch.Generator().manual_seed(1))
    for b, tree in enumerate(trees):  # make the target like some child, so paths are long
        for node in range(num_nodes):
            kids = tree.children(node)
            if kids and rng.random() < 0.8:
                logits[b, node, tree.tokens[rng.choice(kids)]] += 5.0
    temperatures = torch.tensor([0.0, 1.0, 0.0, 0.7, 0.0, 0.0])
    top_ks = torch.zeros(6, dtype=torch.long)
    probs = reference_ops.target_probs(logits, vocab, temperatures, top_ks, torch.ones(6))
    noise = reference_ops.sampling_noise(6, num_nodes, device="cpu",
                                         generator=torch.Generator().manual_seed(2))
    result = reference_ops.verify_tree_sampling(*tree_tensors(trees), probs, noise, depth)
    for b, tree in enumerate(trees):
        if temperatures[b] > 0:
            continue
        predict = [max(range(vocab), key=lambda t: (logits[b, n, t].item(), -t))
                   for n in range(num_nodes)]
        path, bonus = oracle.greedy_accept(tree, predict, depth)
        assert result.accepted_nodes[b].tolist()[: len(path)] == path
        assert result.accept_lens[b].item() == len(path)
        assert result.bonus_tokens[b].item() == bonus


def test_root_only_tree_samples_bonus_from_root(reference_ops):
    """N = 1: nothing to accept; the bonus is the (one-hot) target token at the root."""
    probs = torch.zeros(2, 1, 5)
    probs[0, 0, 3] = 1.0
    probs[1, 0, 1] = 1.0
    noise = reference_ops.sampling_noise(2, 1, device="cpu")
    empty = torch.full((2, 1), NO_NODE)
    result = reference_ops.verify_tree_sampling(torch.zeros(2, 1, dtype=torch.long), empty, empty,
                                                probs, noise, 3)
    assert result.accept_lens.tolist() == [1, 1]
    assert result.bonus_tokens.tolist() == [3, 1]
    assert result.accepted_nodes.tolist() == [[0, NO_NODE, NO_NODE, NO_NODE]] * 2


def test_verify_shape_errors(reference_ops):
    """Mismatched tree tensors and noise shapes raise TreeConfigError."""
    tokens = torch.zeros(2, 4, dtype=torch.long)
    links = torch.full((2, 4), NO_NODE)
    with pytest.raises(TreeConfigError):
        reference_ops.verify_greedy(tokens, links[:, :3], links, tokens, 2)
    bad_noise = SamplingNoise(torch.zeros(2, 3, dtype=torch.long), torch.zeros(2, dtype=torch.long))
    with pytest.raises(TreeConfigError, match="noise"):
        reference_ops.verify_tree_sampling(tokens, links, links, torch.rand(2, 4, 5), bad_noise, 2)
    with pytest.raises(TreeConfigError, match="draft_probs"):
        reference_ops.verify_chain_sampling(tokens, torch.rand(2, 4, 5), torch.rand(2, 4, 5),
                                            SamplingNoise(tokens, tokens[:, 0]))
