"""Losslessness of speculative sampling, by chi-square tests against exact target laws.

Each case runs one op call over many independent samples (the batch) and compares the
empirical law of the emitted tokens with the law of sampling from the target alone, worked
out exactly in float64 by the oracle. Pearson's chi-square (bins with expected count < 5
pooled) is judged at ALPHA = 1e-4 per case: a correct sampler fails a case with probability
1e-4 over the choice of seed, so the 13 chi-square checks of this module together fail
falsely with probability <= 1.3e-3 (union bound). Seeds are fixed, so the outcome is
deterministic. A companion test shows the same machinery rejects a subtly wrong law.
"""

from __future__ import annotations

import itertools
import random

import ops_oracle as oracle
import pytest
import torch

ALPHA = 1e-4
PAD = 2  # padded vocabulary entries, given huge logits that must never be sampled


def chi_square_pvalue(statistic: float, dof: int) -> float:
    """Upper tail of the chi-square law: Q(dof / 2, x / 2)."""
    return torch.special.gammaincc(torch.tensor(dof / 2, dtype=torch.float64),
                                   torch.tensor(statistic / 2, dtype=torch.float64)).item()


def assert_law(counts: dict, expected: dict, samples: int) -> None:
    statistic, dof, impossible = oracle.chi_square_counts(counts, expected, samples)
    assert not impossible, f"outcomes of probability 0 were emitted: {impossible[:5]}"
    pvalue = chi_square_pvalue(statistic, dof)
    assert pvalue > ALPHA, f"chi-square {statistic:.1f} on {dof} dof, p = {pvalue:.2e}"


class TargetModel:
    """A random target: logits for every prefix shorter than ``length`` and the exact
    float64 sampling law after temperature / top-k / top-p (regenerated if a top-p cut is
    too close to call in float32)."""

    def __init__(self, seed: int, vocab: int, length: int, temperature: float, top_k: int,
                 top_p: float):
        generator = torch.Generator().manual_seed(seed)
        self.vocab = vocab
        self.settings = (temperature, top_k, top_p)
        self.logits: dict[tuple, list[float]] = {}
        self.law: dict[tuple, list[float]] = {}
        for size in range(length):
            for prefix in itertools.product(range(vocab), repeat=size):
                while True:
                    row = (torch.randn(vocab, generator=generator) * 1.5).tolist()
                    law, margin = oracle.filtered_distribution(row, *self.settings)
                    if margin > 1e-4:
                        break
                self.logits[prefix] = row
                self.law[prefix] = law

    def probs(self, ops, prefixes: list[tuple]) -> torch.Tensor:
        """The op's target distribution for each prefix: [len(prefixes), V + PAD]."""
        rows = torch.tensor([self.logits[p] + [1e4] * PAD for p in prefixes]).unsqueeze(0)
        temperature, top_k, top_p = self.settings
        probs = ops.target_probs(rows, self.vocab, torch.tensor([temperature]),
                                 torch.tensor([top_k]), torch.tensor([top_p]))
        return probs[0]


def tree_law(tree: oracle.Tree, model: TargetModel) -> dict:
    """Exact law of (last accepted node, bonus) under target-only sampling: follow the tree
    while the sampled token matches a child (the first such sibling), stop at the first
    token that leaves it."""
    law = {}
    reach = {0: 1.0}
    for node in range(tree.size):  # parents precede children
        if node > 0:
            parent = tree.parents[node]
            token = tree.tokens[node]
            first = tree.child_with_token(parent, token) == node
            reach[node] = reach[parent] * model.law[tree.path_tokens(parent)][token] * first
        p = model.law[tree.path_tokens(node)]
        child_tokens = {tree.tokens[c] for c in tree.children(node)}
        for token in range(model.vocab + PAD):
            inside = token < model.vocab and token not in child_tokens
            law[(node, token)] = reach[node] * p[token] if inside else 0.0
    return law


TREE_CASES = [  # (seed, vocab, nodes, depth, temperature, top_k, top_p, distinct siblings)
    (1, 5, 6, 2, 1.0, 0, 1.0, True),
    (2, 5, 8, 3, 0.7, 3, 1.0, True),
    (3, 5, 8, 3, 1.3, 0, 0.8, True),
    (4, 4, 7, 3, 1.0, 2, 0.9, False),
    (5, 6, 10, 2, 1.0, 0, 1.0, True),
    (6, 3, 1, 1, 1.0, 0, 1.0, True),
]


def run_tree_case(ops, case, samples: int, seeded: bool = False):
    seed, vocab, num_nodes, depth, temperature, top_k, top_p, distinct = case
    tree = oracle.Tree(*oracle.random_tree(random.Random(seed), num_nodes, depth, vocab,
                                           distinct_siblings=distinct))
    model = TargetModel(seed, vocab, depth + 1, temperature, top_k, top_p)
    probs = model.probs(ops, [tree.path_tokens(n) for n in range(num_nodes)])
    probs = probs.unsqueeze(0).expand(samples, -1, -1)  # the same tree in every sample
    if seeded:
        noise = ops.sampling_noise(samples, num_nodes, device="cpu",
                                   seeds=torch.arange(samples) * 7919 + seed, counter=11)
    else:
        noise = ops.sampling_noise(samples, num_nodes, device="cpu",
                                   generator=torch.Generator().manual_seed(seed))

    def per_sample(values: list[int]) -> torch.Tensor:
        return torch.tensor(values).expand(samples, -1)

    result = ops.verify_tree_sampling(
        per_sample(tree.tokens), per_sample([tree.next_token(n) for n in range(num_nodes)]),
        per_sample([tree.next_sibling(n) for n in range(num_nodes)]), probs, noise, depth)
    last = result.accepted_nodes.gather(1, (result.accept_lens - 1).unsqueeze(1)).squeeze(1)
    keys = (last * (vocab + PAD) + result.bonus_tokens).tolist()
    counts: dict = {}
    for key in keys:
        pair = divmod(key, vocab + PAD)
        counts[pair] = counts.get(pair, 0) + 1
    return counts, tree, model


@pytest.mark.parametrize("case", TREE_CASES)
def test_tree_sampling_emits_the_target_law(reference_ops, case):
    """Tree speculative sampling's (path, bonus) law equals target-only sampling's."""
    samples = 20000
    counts, tree, model = run_tree_case(reference_ops, case, samples)
    assert_law(counts, tree_law(tree, model), samples)


def test_tree_sampling_with_seeded_noise(reference_ops):
    """Per-request seeded noise (one seed per sample) is as good as a generator's."""
    samples = 20000
    counts, tree, model = run_tree_case(reference_ops, TREE_CASES[1], samples, seeded=True)
    assert_law(counts, tree_law(tree, model), samples)


def test_chi_square_detects_a_wrong_law(reference_ops):
    """Power check: the same counts fail against the law without the top-k cut."""
    samples = 20000
    case = TREE_CASES[1]
    counts, tree, _ = run_tree_case(reference_ops, case, samples)
    seed, vocab, _, depth, temperature, _, top_p, _ = case
    wrong = TargetModel(seed, vocab, depth + 1, temperature, 0, top_p)
    statistic, dof, impossible = oracle.chi_square_counts(counts, tree_law(tree, wrong), samples)
    assert impossible or chi_square_pvalue(statistic, dof) < ALPHA


CHAIN_CASES = [  # (seed, vocab, steps, temperature, top_k, top_p, draft sparsity)
    (11, 4, 3, 1.0, 0, 1.0, 0.0),
    (12, 4, 3, 0.8, 3, 0.9, 0.0),
    (13, 3, 2, 1.0, 0, 1.0, 0.5),
    (14, 4, 2, 1.5, 0, 0.7, 0.3),
]


@pytest.mark.parametrize("case", CHAIN_CASES)
def test_chain_rejection_sampling_emits_the_target_law(reference_ops, case):
    """Chain speculative sampling with real draft laws q, completed by target-only sampling
    to a fixed length, yields exactly the target's law of that many tokens."""
    seed, vocab, steps, temperature, top_k, top_p, sparsity = case
    samples, length = 40000, steps + 1
    model = TargetModel(seed, vocab, length, temperature, top_k, top_p)
    prefixes = [p for size in range(length) for p in itertools.product(range(vocab), repeat=size)]
    index_of = {p: i for i, p in enumerate(prefixes)}
    extend = torch.tensor([[index_of.get(p + (t,), 0) for t in range(vocab)] for p in prefixes])
    generator = torch.Generator().manual_seed(seed)
    draft_law = torch.rand(len(prefixes), vocab, generator=generator) ** 2
    draft_law[torch.rand(len(prefixes), vocab, generator=generator) < sparsity] = 0.0
    draft_law[:, 0] += 1e-3  # never an all-zero draft law
    draft_law = torch.cat([draft_law / draft_law.sum(1, keepdim=True),
                           torch.zeros(len(prefixes), PAD)], 1)
    target = model.probs(reference_ops, prefixes)  # [P, V + PAD] from the op under test

    state = torch.zeros(samples, dtype=torch.long)  # prefix index of each sample
    tokens, states = [torch.zeros(samples, dtype=torch.long)], [state]
    for _ in range(steps):  # draft: x_i ~ q(. | x_<i)
        token = torch.multinomial(draft_law[state], 1, generator=generator).squeeze(1)
        state = extend[state, token]
        tokens.append(token)
        states.append(state)
    states_t = torch.stack(states, 1)  # [samples, steps + 1]
    noise = reference_ops.sampling_noise(samples, steps + 1, device="cpu",
                                         generator=generator)
    result = reference_ops.verify_chain_sampling(
        torch.stack(tokens, 1), draft_law[states_t[:, :-1]], target[states_t], noise)

    # Emitted tokens, then target-only sampling (the oracle's law) up to ``length``.
    emitted = torch.stack(tokens, 1)[:, 1:].clone()
    count = result.accept_lens - 1  # accepted drafts
    sequence = torch.zeros(samples, length, dtype=torch.long)
    sequence[:, :steps] = emitted
    sequence[torch.arange(samples), count] = result.bonus_tokens
    law = torch.tensor([model.law[p] + [0.0] * PAD for p in prefixes], dtype=torch.float64)
    state = torch.zeros(samples, dtype=torch.long)
    for position in range(length):
        drawn = torch.multinomial(law[state], 1, generator=generator).squeeze(1)
        keep = position <= count  # accepted drafts and the bonus stay
        sequence[:, position] = torch.where(keep, sequence[:, position], drawn)
        state = extend[state, sequence[:, position].clamp(max=vocab - 1)]

    assert int(sequence.max()) < vocab, "a padded vocabulary entry was emitted"
    codes = torch.zeros(samples, dtype=torch.long)
    for position in range(length):
        codes = codes * vocab + sequence[:, position]
    histogram = torch.bincount(codes, minlength=vocab**length).tolist()
    counts = {seq: histogram[i] for i, seq in
              enumerate(itertools.product(range(vocab), repeat=length))}
    expected = oracle.sequence_probabilities(lambda p: model.law[p], vocab, length)
    assert_law(counts, expected, samples)


@pytest.mark.parametrize("temperature,top_k,top_p", [(1.0, 0, 1.0), (0.5, 3, 1.0),
                                                      (1.2, 0, 0.6), (0.9, 5, 0.8), (0.0, 0, 1.0)])
def test_target_probs_match_float64_law(reference_ops, temperature, top_k, top_p):
    """Temperature, top-k and top-p give the oracle's float64 law; the padded tail is 0."""
    vocab = 12
    model = TargetModel(21, vocab, 2, temperature, top_k, top_p)
    prefixes = [(), *[(t,) for t in range(vocab)]]
    probs = model.probs(reference_ops, prefixes)
    expected = torch.tensor([model.law[p] + [0.0] * PAD for p in prefixes], dtype=torch.float32)
    torch.testing.assert_close(probs, expected, atol=1e-6, rtol=1e-5)


def test_seeded_noise_is_reproducible_and_uniform(reference_ops):
    """Seeded noise depends only on (seed, counter, index), and is uniform."""
    seeds = torch.arange(64) * 104729 + 3
    noise = reference_ops.sampling_noise(64, 512, device="cpu", seeds=seeds, counter=5)
    again = reference_ops.sampling_noise(3, 512, device="cpu", seeds=seeds[[9, 2, 40]],
                                         counter=5)
    assert torch.equal(again.accept_draws, noise.accept_draws[[9, 2, 40]])
    assert torch.equal(again.bonus_draws, noise.bonus_draws[[9, 2, 40]])
    later = reference_ops.sampling_noise(64, 512, device="cpu", seeds=seeds, counter=6)
    assert not torch.equal(later.accept_draws, noise.accept_draws)
    draws = torch.cat([noise.accept_draws.flatten(), noise.bonus_draws])
    assert int(draws.min()) >= 0
    # The top 4 and the bottom 4 of the 62 random bits, over 16 bins each.
    for values in (draws >> 58, draws & 15):
        histogram = torch.bincount(values.flatten(), minlength=16).double()
        expected = values.numel() / 16
        statistic = float(((histogram - expected) ** 2 / expected).sum())
        assert chi_square_pvalue(statistic, 15) > ALPHA
