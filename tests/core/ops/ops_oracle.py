"""Brute-force oracles for the SamplingOps tests: explicit tree objects walked in plain Python.

Nothing here uses eagle_hal; every expected value is computed from first principles so that
the tests check the ops against an independent model, never against their own output.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import random

NO_NODE = -1


@dataclasses.dataclass
class Candidate:
    """One draft candidate: its flat id (1-based; 0 is the root), score, token, parent id."""

    cand_id: int
    score: float
    token: int
    parent_id: int


@dataclasses.dataclass
class GrowthStep:
    candidates: list[Candidate]
    frontier: list[Candidate]  # the K kept candidates, best first
    parent_branches: list[int]  # for each frontier entry, its parent's row in the last frontier


def grow(step_probs: list, step_ids: list, topk: int) -> list[GrowthStep]:
    """Grow one request's tree: ``step_probs[0][k]`` at the root, then
    ``step_probs[i][k][j]`` for child j of frontier branch k at step i."""
    steps: list[GrowthStep] = []
    next_id = 1
    for i, (probs, ids) in enumerate(zip(step_probs, step_ids, strict=True)):
        if i == 0:
            cands = [Candidate(next_id + k, float(probs[k]), int(ids[k]), 0) for k in range(topk)]
            steps.append(GrowthStep(cands, cands, [0] * topk))
        else:
            frontier = steps[-1].frontier
            cands = []
            for k in range(topk):
                for j in range(topk):
                    cands.append(Candidate(next_id + k * topk + j,
                                           frontier[k].score * float(probs[k][j]),
                                           int(ids[k][j]), frontier[k].cand_id))
            order = sorted(range(len(cands)), key=lambda c: (-cands[c].score, c))[:topk]
            steps.append(GrowthStep(cands, [cands[c] for c in order], [c // topk for c in order]))
        next_id += len(cands)
    return steps


def organize(steps: list[GrowthStep], num_draft_tokens: int) -> tuple[list, list, list]:
    """(tokens, parent nodes, candidate ids) of the N-1 best candidates in id order."""
    every = [c for s in steps for c in s.candidates]
    best = sorted(every, key=lambda c: (-c.score, c.cand_id))[: num_draft_tokens - 1]
    best.sort(key=lambda c: c.cand_id)
    node_of = {0: 0}
    for node, cand in enumerate(best, start=1):
        node_of[cand.cand_id] = node
    return ([c.token for c in best], [node_of[c.parent_id] for c in best],
            [c.cand_id for c in best])


class Tree:
    """An explicit tree: node 0 the root, ``parents[i] < i`` for the other nodes."""

    def __init__(self, tokens: list[int], parents: list[int]):
        self.tokens = list(tokens)
        self.parents = [0] + list(parents[1:]) if len(parents) == len(tokens) else [0, *parents]
        self.size = len(tokens)

    def children(self, node: int) -> list[int]:
        return [j for j in range(1, self.size) if self.parents[j] == node]

    def ancestors(self, node: int) -> list[int]:
        chain = [node]
        while chain[-1] != 0:
            chain.append(self.parents[chain[-1]])
        return chain[::-1]  # root first, node last

    def depth(self, node: int) -> int:
        return len(self.ancestors(node)) - 1

    def next_token(self, node: int) -> int:
        kids = self.children(node)
        return kids[0] if kids else NO_NODE

    def next_sibling(self, node: int) -> int:
        if node == 0:
            return NO_NODE
        later = [j for j in self.children(self.parents[node]) if j > node]
        return later[0] if later else NO_NODE

    def mask_rows(self) -> list[list[bool]]:
        return [[j in self.ancestors(i) for j in range(self.size)] for i in range(self.size)]

    def path_tokens(self, node: int) -> tuple[int, ...]:
        """Tokens from the root's first child down to ``node`` (the root token excluded)."""
        return tuple(self.tokens[a] for a in self.ancestors(node)[1:])

    def child_with_token(self, node: int, token: int) -> int | None:
        for j in self.children(node):
            if self.tokens[j] == token:
                return j
        return None


def greedy_accept(tree: Tree, predict: list[int], num_steps: int) -> tuple[list[int], int]:
    """Longest root-to-node path (at most num_steps drafts) whose every token equals the
    target's choice at its parent, by enumerating all paths. Returns (path, bonus)."""
    best = [0]
    for node in range(tree.size):
        path = tree.ancestors(node)
        if len(path) - 1 > num_steps:
            continue
        if all(tree.tokens[path[d]] == predict[path[d - 1]] for d in range(1, len(path))):
            if len(path) > len(best):
                best = path
    return best, predict[best[-1]]


def random_tree(rng: random.Random, num_nodes: int, max_depth: int, vocab: int,
                distinct_siblings: bool = True) -> tuple[list[int], list[int]]:
    """Random (tokens, parents) with parents[i] < i, depth <= max_depth; siblings carry
    distinct tokens unless asked otherwise (needs vocab >= the widest fan-out)."""
    tokens = [rng.randrange(vocab)]
    parents = [0]
    depth = [0]
    for i in range(1, num_nodes):
        allowed = [j for j in range(i) if depth[j] < max_depth]
        if distinct_siblings:
            allowed = [j for j in allowed
                       if sum(1 for k in range(1, i) if parents[k] == j) < vocab]
        parent = rng.choice(allowed)
        used = {tokens[k] for k in range(1, i) if parents[k] == parent}
        choices = [t for t in range(vocab) if not (distinct_siblings and t in used)]
        tokens.append(rng.choice(choices))
        parents.append(parent)
        depth.append(depth[parent] + 1)
    return tokens, parents


def random_predictions(rng: random.Random, tree: Tree, vocab: int) -> list[int]:
    """Target choices that follow some child 70% of the time, so long paths occur."""
    predict = []
    for node in range(tree.size):
        kids = tree.children(node)
        if kids and rng.random() < 0.7:
            predict.append(tree.tokens[rng.choice(kids)])
        else:
            predict.append(rng.randrange(vocab))
    return predict


# -- sampling distributions -------------------------------------------------------------


def filtered_distribution(logits: list[float], temperature: float, top_k: int,
                          top_p: float) -> tuple[list[float], float]:
    """The target distribution in float64 and the smallest distance of a top-p cumulative
    from its threshold (callers avoid cases too close to call)."""
    vocab = len(logits)
    if temperature <= 0:
        best = max(range(vocab), key=lambda t: (logits[t], -t))
        return [1.0 if t == best else 0.0 for t in range(vocab)], math.inf
    peak = max(logits)
    weights = [math.exp((x - peak) / temperature) for x in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    order = sorted(range(vocab), key=lambda t: (-probs[t], t))
    k = vocab if top_k <= 0 or top_k > vocab else top_k
    kept = order[:k]
    mass = sum(probs[t] for t in kept)
    result = [0.0] * vocab
    before = 0.0
    margin = math.inf
    for rank, t in enumerate(kept):
        threshold = top_p * mass
        if rank > 0:
            margin = min(margin, abs(before - threshold))
        if rank == 0 or before < threshold:
            result[t] = probs[t]
        before += probs[t]
    norm = sum(result)
    return [p / norm for p in result], margin


def sequence_probabilities(conditional, vocab: int, length: int) -> dict[tuple, float]:
    """P(x_1..x_L) = prod conditional(prefix)[x_t] for every sequence of ``length``."""
    table = {}
    for seq in itertools.product(range(vocab), repeat=length):
        prob = 1.0
        for t in range(length):
            prob *= conditional(seq[:t])[seq[t]]
            if prob == 0.0:
                break
        table[seq] = prob
    return table


def chi_square_counts(observed: dict, expected_probs: dict, num_samples: int,
                      min_expected: float = 5.0) -> tuple[float, int, list]:
    """Pearson statistic with bins of expected count < min_expected pooled into one.
    Returns (statistic, degrees of freedom, impossible outcomes that were observed)."""
    impossible = [k for k, n in observed.items() if n and expected_probs.get(k, 0.0) == 0.0]
    statistic, bins = 0.0, 0
    pooled_obs, pooled_exp = 0.0, 0.0
    for key, prob in expected_probs.items():
        if prob == 0.0:
            continue
        exp = prob * num_samples
        obs = observed.get(key, 0)
        if exp < min_expected:
            pooled_obs += obs
            pooled_exp += exp
        else:
            statistic += (obs - exp) ** 2 / exp
            bins += 1
    if pooled_exp > 0:
        statistic += (pooled_obs - pooled_exp) ** 2 / pooled_exp
        bins += 1
    return statistic, max(bins - 1, 1), impossible
