"""The logits stage on random verify trees against a brute force: for every node, walk its
path to the root by hand, count the prefix's and the path's tokens, and apply the bias and
penalties one token at a time in float64."""

from __future__ import annotations

import random

import pytest
import sampling_oracle as oracle
import torch
from eagle_hal.engine.request import Request, SamplingParams
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.reference import ReferenceSamplingOps
from eagle_hal.speculative.logits_processing import LogitsProcessing

VOCAB, PAD = 11, 3


def random_tree(rng: random.Random, nodes: int, chain: int = 0) -> tuple[list[int], list[int]]:
    """Tokens and parents (node 0 the root; parents precede children), nodes 1 to
    ``chain`` a chain below the root."""
    parents = [0] + [i - 1 if i <= chain else rng.randrange(i) for i in range(1, nodes)]
    tokens = [rng.randrange(VOCAB) for _ in range(nodes)]
    return tokens, parents


def path(parents: list[int], node: int) -> list[int]:
    """The drafted nodes from the root (excluded) down to ``node`` (included), in order."""
    out = []
    while node != 0:
        out.append(node)
        node = parents[node]
    return out[::-1]


@pytest.mark.parametrize("seed", range(6))
def test_each_node_is_processed_with_its_own_path(seed):
    rng = random.Random(seed)
    ops = ReferenceSamplingOps()
    batch, nodes = 3, rng.randint(4, 9)
    # rows of different depths, the first at least 3 deep
    trees = [random_tree(rng, nodes, chain=3 if b == 0 else 0) for b in range(batch)]
    assert max(len(path(trees[0][1], i)) for i in range(nodes)) >= 3
    params = [
        SamplingParams(presence_penalty=1.25, frequency_penalty=-0.5, repetition_penalty=1.7,
                       logit_bias={1: 3.0, 4: -100}),
        SamplingParams(),  # untouched: bit for bit
        SamplingParams(repetition_penalty=0.6, frequency_penalty=2.0),
    ]
    requests = []
    for b in range(batch):
        prompt = [rng.randrange(VOCAB) for _ in range(rng.randint(1, 5))]
        request = Request(b, prompt, params[b])
        request.output_ids = [rng.randrange(VOCAB) for _ in range(rng.randint(0, 6))]
        request.output_ids.append(trees[b][0][0])  # the root is the last output token
        requests.append(request)
    tokens = torch.tensor([t for t, _ in trees])
    # the links of each tree, as the verify layout builds them
    layout = ops.build_verify_tree(
        tokens[:, 0], tokens[:, 1:], torch.tensor([p[1:] for _, p in trees]),
        torch.zeros(batch, dtype=torch.long), TreeMaskMode.TREE_BLOCK)
    generator = torch.Generator().manual_seed(seed)
    logits = 4 * torch.randn(batch, nodes, VOCAB + PAD, generator=generator)
    stage = LogitsProcessing(VOCAB, "cpu")
    got = stage.apply(logits, requests, layout.tokens, layout.retrieve_next_token,
                      layout.retrieve_next_sibling)
    # build_verify_tree keeps node order (parents precede children), so node i is node i
    assert torch.equal(layout.tokens, tokens)
    for b, request in enumerate(requests):
        tree_tokens, parents = trees[b]
        for i in range(nodes):
            output = request.output_ids + [tree_tokens[j] for j in path(parents, i)]
            expected = oracle.processed_logits(logits[b, i, :VOCAB].double().tolist(),
                                               request.prompt_ids, output, request.params)
            assert torch.allclose(got[b, i, :VOCAB].double(), torch.tensor(expected,
                                  dtype=torch.float64), atol=1e-5), (b, i)
        assert torch.equal(got[b, :, VOCAB:], logits[b, :, VOCAB:])  # padding untouched
    assert torch.equal(got[1], logits[1])


def test_no_batch_wide_temporaries():
    """The stage's memory stays that of its output: no other allocation as large as a
    quarter of a float32 batch x nodes x vocab array (a bool one would be), whatever the
    penalties (the torch profiler records each allocation)."""
    from torch.profiler import ProfilerActivity, profile

    vocab, batch, parents = 4096, 8, [0, 0, 1, 2, 3, 1, 5, 6]
    nodes = len(parents)
    ops = ReferenceSamplingOps()
    tokens = torch.randint(0, vocab, (batch, nodes), generator=torch.Generator().manual_seed(0))
    layout = ops.build_verify_tree(tokens[:, 0], tokens[:, 1:],
                                   torch.tensor([parents[1:]] * batch),
                                   torch.zeros(batch, dtype=torch.long), TreeMaskMode.TREE_BLOCK)
    requests = []
    for b in range(batch):
        request = Request(b, [1, 2, 3], SamplingParams(
            presence_penalty=0.5, frequency_penalty=0.2, repetition_penalty=1.3,
            logit_bias={7: 1.0}))
        request.output_ids = [4, 5, int(tokens[b, 0])]
        requests.append(request)
    stage = LogitsProcessing(vocab, "cpu")
    logits = torch.randn(batch, nodes, vocab)
    args = (logits, requests, layout.tokens, layout.retrieve_next_token,
            layout.retrieve_next_sibling)
    stage.apply(*args)  # the per-request state is built once, outside the measurement
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        stage.apply(*args)
    full = batch * nodes * vocab * 4
    large = [e.self_cpu_memory_usage for e in prof.events()
             if e.self_cpu_memory_usage >= full // 4]
    assert large == [full], large  # the output


def test_counts_grow_with_the_output():
    """The stage keeps each request's counts between batches: later calls see the tokens
    appended since."""
    request = Request(0, [2, 3], SamplingParams(presence_penalty=2.0))
    request.output_ids = [5]
    stage = LogitsProcessing(VOCAB, "cpu")
    logits = torch.zeros(1, 1, VOCAB)
    first = stage.apply(logits, [request])
    request.output_ids += [6, 6]
    second = stage.apply(logits, [request])
    assert first[0, 0, 5] == -2.0 and first[0, 0, 6] == 0.0
    assert second[0, 0, 5] == -2.0 and second[0, 0, 6] == -2.0 and second[0, 0, 2] == 0.0
