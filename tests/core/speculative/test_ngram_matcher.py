"""The n-gram drafter's suffix matcher and trees against brute force over random sequences.

The oracle recomputes everything from the token list by slicing: each end's match length
by comparing the slices directly, every candidate path's support by comparing it with
every continuation, each level's top-K by sorting the siblings, the tree by sorting every
eligible path. The drafter uses its incremental n-gram index and a trie instead.
"""

from __future__ import annotations

from collections import Counter

import pytest
from eagle_hal.errors import InvalidArgument
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.speculative.drafter import Drafter, Proposal
from eagle_hal.speculative.ngram import NgramDrafter, parse_ngram
from hypothesis import given, settings
from hypothesis import strategies as st


def match_lengths(tokens: list[int], max_ngram: int) -> dict[int, int]:
    """Every end j < L with its longest match m <= max_ngram (m >= 1)."""
    length = len(tokens)
    out = {}
    for j in range(1, length):
        best = 0
        for m in range(1, min(max_ngram, j) + 1):
            if tokens[j - m:j] == tokens[length - m:]:
                best = m
        if best:
            out[j] = best
    return out


def oracle_tree(tokens: list[int], max_ngram: int, steps: int, topk: int,
                nodes: int) -> list[tuple[int, ...]]:
    """The proposal as the paths of its nodes, in layout order."""
    length = len(tokens)
    ends = match_lengths(tokens, max_ngram)
    paths = {tuple(tokens[j:j + d]) for j in ends for d in range(1, min(steps, length - j) + 1)}

    def key(path: tuple[int, ...]) -> tuple[int, ...]:
        support = [(m, j) for j, m in ends.items() if tuple(tokens[j:j + len(path)]) == path]
        best = max(m for m, _ in support)
        top = [j for m, j in support if m == best]
        return (-best, -len(top), -max(top), len(path), path[-1])

    def eligible(path: tuple[int, ...]) -> bool:
        for d in range(1, len(path) + 1):
            prefix = path[:d]
            siblings = sorted((p for p in paths if len(p) == d and p[:-1] == prefix[:-1]),
                              key=key)
            if siblings.index(prefix) >= topk:
                return False
        return True

    return sorted((p for p in paths if eligible(p)), key=key)[: nodes - 1]


def as_paths(proposal: Proposal) -> list[tuple[int, ...]]:
    paths: list[tuple[int, ...]] = [()]
    for token, parent in zip(proposal.tokens, proposal.parents, strict=True):
        assert 0 <= parent < len(paths)  # parents come before their children
        paths.append(paths[parent] + (token,))
    return paths[1:]


sequences = st.lists(st.integers(0, 5), min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(tokens=sequences, max_ngram=st.integers(1, 4), steps=st.integers(1, 5),
       topk=st.integers(1, 3), nodes=st.integers(2, 12))
def test_tree_equals_brute_force(tokens, max_ngram, steps, topk, nodes):
    nodes = min(nodes, topk + (steps - 1) * topk * topk + 1)  # what the shape can hold
    drafter = NgramDrafter(max_ngram, topk)
    (proposal,) = drafter.propose([7], [tokens], TreeShape(steps, topk, nodes))
    paths = as_paths(proposal)
    assert paths == oracle_tree(tokens, max_ngram, steps, topk, nodes)
    for path in paths:  # siblings distinct, at most K per node, at most S levels
        assert len(path) <= steps
    children = Counter(p[:-1] for p in paths)
    assert all(n <= topk for n in children.values())
    assert len(set(paths)) == len(paths)


@settings(max_examples=150, deadline=None)
@given(tokens=sequences, max_ngram=st.integers(1, 4), steps=st.integers(1, 5))
def test_chain_follows_the_latest_longest_match(tokens, max_ngram, steps):
    """K = 1: the first token is the most frequent follower among the longest earlier
    matches of the suffix (ties: the latest); when the longest match occurs once, the
    chain starts with what followed it (a shorter match continues it where the end of
    the tokens cuts that short)."""
    drafter = NgramDrafter(max_ngram, 1)
    (proposal,) = drafter.propose([1], [tokens], TreeShape(steps, 1, steps + 1))
    length = len(tokens)
    longest, ends = 0, []
    for m in range(min(max_ngram, length - 1), 0, -1):
        ends = [j for j in range(m, length) if tokens[j - m:j] == tokens[length - m:]]
        if ends:
            longest = m
            break
    if not longest:
        assert proposal == Proposal()
        return
    followers = Counter(tokens[j] for j in ends)
    most = max(followers.values())
    first = tokens[max(j for j in ends if followers[tokens[j]] == most)]
    assert proposal.tokens[0] == first
    assert proposal.parents == tuple(range(len(proposal.tokens)))  # a chain
    if len(ends) == 1:
        (j,) = ends
        followed = tokens[j:j + steps]
        assert list(proposal.tokens[:len(followed)]) == followed


def test_incremental_index_equals_a_fresh_one():
    """Observed tokens extend the index; a proposal over a request's tokens equals a fresh
    drafter's over the same tokens, and a sequence that is not a continuation rebuilds."""
    import random

    rng = random.Random(3)
    shape = TreeShape(4, 2, 8)
    drafter = NgramDrafter(3, 2)
    tokens = [rng.randrange(4) for _ in range(5)]
    for _ in range(60):
        (proposal,) = drafter.propose([0], [tokens], shape)
        assert proposal == NgramDrafter(3, 2).propose([0], [tokens], shape)[0]
        emitted = [rng.randrange(4) for _ in range(rng.randrange(1, 4))]
        drafter.observe(0, emitted)
        tokens = tokens + emitted
    other = [9, 9, 8, 9, 9]
    assert drafter.propose([0], [other], shape) == NgramDrafter(3, 2).propose([0], [other],
                                                                              shape)
    drafter.release(0)
    assert not drafter._indexes


def test_no_match_proposes_nothing():
    drafter = NgramDrafter(3, 2)
    assert isinstance(drafter, Drafter)
    assert drafter.propose([0, 1], [[1, 2, 3, 4], [5]], TreeShape(3, 2, 7)) == [Proposal()] * 2


def test_matches_disagreeing_give_distinct_siblings_best_first():
    # "1 2" was followed by 3 twice and by 4 once: 3 first, then 4, as siblings
    tokens = [1, 2, 3, 0, 1, 2, 4, 0, 1, 2, 3, 5, 1, 2]
    (proposal,) = NgramDrafter(2, 2).propose([0], [tokens], TreeShape(2, 2, 5))
    paths = as_paths(proposal)
    assert paths[0] == (3,) and (4,) in paths
    assert proposal.parents[paths.index((4,))] == 0


@pytest.mark.parametrize("text, expected", [
    ("ngram", (3, 1)), ("ngram:5", (5, 1)), ("ngram:3,2", (3, 2)), ("NGRAM:2, 4", (2, 4)),
])
def test_parse(text, expected):
    assert parse_ngram("--draft", text) == expected


@pytest.mark.parametrize("text", ["ngram:", "ngram:0", "ngram:3,0", "ngram:a", "ngram:3,2,1",
                                  "ngram:99", "ngram:-1", "gram:3"])
def test_parse_refuses(text):
    with pytest.raises(InvalidArgument) as caught:
        parse_ngram("--draft", text)
    assert caught.value.name == "--draft" and caught.value.value == text
