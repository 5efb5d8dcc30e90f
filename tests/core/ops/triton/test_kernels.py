"""Every Triton kernel equals the reference op (integer outputs bit for bit) on random cases.

Without an accelerator the kernels run under TRITON_INTERPRET=1 on CPU tensors, which is
slow: the shapes are small, but they cover tails (N = 1, non-power-of-two sizes, several
vocabulary blocks and chunks), N = 64 bit-packed masks and duplicate sibling tokens.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys

import ops_oracle as oracle
import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.hal.sampling import NO_NODE  # noqa: E402
from eagle_hal.hal.tree_mask import TreeMaskMode  # noqa: E402
from eagle_hal.ops.reference import ReferenceSamplingOps  # noqa: E402
from eagle_hal.ops.triton import TritonSamplingOps  # noqa: E402

INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = torch.device("cpu") if INTERPRETED else torch.accelerator.current_accelerator()
REFERENCE = ReferenceSamplingOps()
# Small blocks so that tiny vocabularies still take several blocks and chunks.
TRITON = TritonSamplingOps(num_warps=2, vocab_block=16, vocab_chunk=32)


def assert_same(expected, actual) -> None:
    names = getattr(expected, "_fields", range(len(expected)))
    for name, e, a in zip(names, expected, actual, strict=True):
        if isinstance(e, torch.Tensor):
            assert e.dtype == a.dtype and torch.equal(e, a), f"{name}: {e} != {a}"
        else:
            assert e == a, name


def random_trees(seed: int, batch: int, num_nodes: int, depth: int, vocab: int,
                 distinct: bool = True) -> list[oracle.Tree]:
    rng = random.Random(seed)
    return [oracle.Tree(*oracle.random_tree(rng, num_nodes, depth, vocab, distinct))
            for _ in range(batch)]


def on_device(*tensors: torch.Tensor):
    return [t.to(DEVICE) for t in tensors]


@pytest.mark.parametrize("batch,num_nodes,depth", [(2, 1, 1), (3, 7, 3), (2, 23, 5), (2, 64, 6),
                                                   (1, 70, 4)])
def test_build_verify_tree(batch, num_nodes, depth):
    """Tokens, positions, retrieve links and every mask layout equal the reference."""
    trees = random_trees(num_nodes, batch, num_nodes, depth, vocab=500)
    root, drafts, parents, seq_lens = on_device(
        torch.tensor([t.tokens[0] for t in trees]),
        torch.tensor([t.tokens[1:] for t in trees], dtype=torch.long).view(batch, -1),
        torch.tensor([t.parents[1:] for t in trees], dtype=torch.long).view(batch, -1),
        torch.tensor([5, 0, 37][:batch]),
    )
    for mode in TreeMaskMode.ALL:
        if mode == TreeMaskMode.BIT_PACKED and num_nodes > 64:
            continue
        args = (root, drafts, parents, seq_lens, mode, int(seq_lens.sum()))
        assert_same(REFERENCE.build_verify_tree(*args), TRITON.build_verify_tree(*args))


@pytest.mark.parametrize("vocab,padded,dtype", [
    (1, 1, torch.float32), (13, 16, torch.float32), (100, 128, torch.bfloat16),
    (77, 77, torch.float16)])
def test_masked_argmax(vocab, padded, dtype):
    """Split-vocabulary argmax: same index as the reference, ties to the first, tail ignored."""
    generator = torch.Generator().manual_seed(vocab)
    logits = torch.randint(-3, 3, (4, 3, padded), generator=generator).to(dtype)
    logits[..., vocab:] = 50
    logits[0, 0, :vocab] = float("-inf")
    (logits,) = on_device(logits)
    assert_same([REFERENCE.masked_argmax(logits, vocab)], [TRITON.masked_argmax(logits, vocab)])


@pytest.mark.parametrize("batch,num_nodes,depth", [(3, 1, 2), (4, 9, 3), (3, 31, 5), (2, 64, 8)])
def test_verify_greedy(batch, num_nodes, depth):
    """Greedy walk: accepted nodes, lengths and bonus equal the reference."""
    trees = random_trees(num_nodes + 1, batch, num_nodes, depth, vocab=64)
    rng = random.Random(num_nodes)
    predict = [oracle.random_predictions(rng, t, 64) for t in trees]
    tensors = on_device(
        torch.tensor([t.tokens for t in trees]),
        torch.tensor([[t.next_token(i) for i in range(num_nodes)] for t in trees]),
        torch.tensor([[t.next_sibling(i) for i in range(num_nodes)] for t in trees]),
        torch.tensor(predict),
    )
    for num_steps in (depth, max(depth - 2, 0)):
        assert_same(REFERENCE.verify_greedy(*tensors, num_steps),
                    TRITON.verify_greedy(*tensors, num_steps))


@pytest.mark.parametrize("batch,num_nodes,depth,vocab,distinct", [
    (4, 1, 1, 5, True), (6, 8, 3, 6, True), (5, 12, 3, 4, False), (4, 20, 4, 37, True)])
def test_verify_tree_sampling(batch, num_nodes, depth, vocab, distinct):
    """Sampling decisions and bonus tokens equal the reference for the same noise."""
    trees = random_trees(vocab + num_nodes, batch, num_nodes, depth, vocab, distinct)
    generator = torch.Generator().manual_seed(num_nodes)
    logits = torch.randn(batch, num_nodes, vocab + 3, generator=generator) * 2
    for b, tree in enumerate(trees):  # favour children so that walks go deep
        for node in range(num_nodes):
            for child in tree.children(node)[:1]:
                logits[b, node, tree.tokens[child]] += 5.0
    temperatures = torch.tensor([1.0, 0.0, 0.7, 1.5, 1.0, 0.0])[:batch]
    top_ks = torch.tensor([0, 0, 3, 0, 2, 0])[:batch]
    top_ps = torch.tensor([1.0, 1.0, 1.0, 0.8, 0.9, 1.0])[:batch]
    probs = REFERENCE.target_probs(logits, vocab, temperatures, top_ks, top_ps)
    tokens, next_token, next_sibling, probs = on_device(
        torch.tensor([t.tokens for t in trees]),
        torch.tensor([[t.next_token(i) for i in range(num_nodes)] for t in trees]),
        torch.tensor([[t.next_sibling(i) for i in range(num_nodes)] for t in trees]),
        probs,
    )
    for seed in range(3):
        noise = REFERENCE.sampling_noise(batch, num_nodes, device=DEVICE,
                                         seeds=torch.arange(batch) + 100 * seed, counter=seed)
        args = (tokens, next_token, next_sibling, probs, noise, depth)
        assert_same(REFERENCE.verify_tree_sampling(*args), TRITON.verify_tree_sampling(*args))


def test_bookkeeping_kernels():
    """Bonus fill, verify-slot assignment and draft KV slots equal the reference."""
    rng = random.Random(0)
    batch, num_nodes, width = 5, 6, 4
    tokens = torch.randint(0, 900, (batch, num_nodes), generator=torch.Generator().manual_seed(0))
    accepted, lens = [], []
    for _ in range(batch):
        length = rng.randint(1, width)
        path = [0] + sorted(rng.sample(range(1, num_nodes), length - 1))
        accepted.append(path + [NO_NODE] * (width - length))
        lens.append(length)
    args = on_device(tokens, torch.tensor(accepted), torch.tensor(lens), torch.arange(batch) + 7)
    assert_same([REFERENCE.fill_bonus_tokens(*args)], [TRITON.fill_bonus_tokens(*args)])

    for dtype in (torch.int32, torch.int64):
        expected, actual = (torch.zeros(7, 40, dtype=dtype, device=DEVICE) for _ in range(2))
        slot_args = on_device(torch.tensor([6, 0, 3, 1, 2]), torch.tensor([0, 9, 33, 4, 17]),
                              torch.arange(batch * num_nodes) + 1000)
        REFERENCE.assign_verify_slots(expected, *slot_args)
        TRITON.assign_verify_slots(actual, *slot_args)
        assert torch.equal(expected, actual)

    generator = torch.Generator().manual_seed(1)
    for steps, topk in ((1, 1), (4, 1), (5, 3)):
        (scratch,) = on_device(torch.randperm(2 * steps * topk, generator=generator)
                               .view(2, steps, topk).int())
        parents = on_device(*[torch.randint(0, topk, (2, topk), generator=generator)
                              for _ in range(steps)])
        for step in range(steps):
            assert_same([REFERENCE.draft_kv_slots(scratch, parents, step)],
                        [TRITON.draft_kv_slots(scratch, parents, step)])


@pytest.mark.parametrize("batch,num_nodes", [(1, 1), (5, 7), (3, 64)])
def test_seeded_noise(batch, num_nodes):
    """The fused counter-based hash gives the reference's draws bit for bit."""
    (seeds,) = on_device(torch.tensor([0, -1, 2**40 + 3, 17, 99])[:batch])
    for counter in (0, 7, torch.arange(batch, device=DEVICE) * 1000 + 2**33):
        assert_same(REFERENCE.sampling_noise(batch, num_nodes, device=DEVICE, seeds=seeds,
                                             counter=counter),
                    TRITON.sampling_noise(batch, num_nodes, device=DEVICE, seeds=seeds,
                                          counter=counter))


def test_import_without_triton_names_the_missing_package():
    """`import eagle_hal.ops.triton` without triton raises an ImportError that says why."""
    code = (
        "import sys; sys.modules['triton'] = None\n"
        "try:\n    import eagle_hal.ops.triton\nexcept ImportError as e:\n    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "needs the 'triton' package" in out.stdout, out.stderr


@pytest.mark.parametrize("batch,topk,steps", [(1, 1, 3), (2, 2, 4), (3, 4, 5), (2, 3, 3),
                                              (1, 8, 3), (2, 5, 2)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_grow_tree_step(batch, topk, steps, dtype):
    """Every step's frontier and candidates equal the reference's, bit for bit, with
    probabilities in eighths (exact products, frequent ties: the lower index must win) fed
    as [B*K, K] and as [B, K, K]; the drafts organised from them too."""
    generator = torch.Generator().manual_seed(batch * 100 + topk * 10 + steps)

    def eighths(*shape: int) -> torch.Tensor:
        return (torch.randint(0, 9, shape, generator=generator).float() / 8).to(dtype)

    root_probs, root_ids = eighths(batch, topk), torch.randint(0, 99, (batch, topk),
                                                              generator=generator)
    grown = {ops: [ops.grow_tree_step(*on_device(root_probs, root_ids), None)]
             for ops in (REFERENCE, TRITON)}
    for depth in range(1, steps):
        probs = eighths(batch * topk, topk)
        ids = torch.randint(0, 99, (batch * topk, topk), generator=generator)
        if depth % 2:
            probs, ids = probs.view(batch, topk, topk), ids.view(batch, topk, topk)
        for ops, steps_so_far in grown.items():
            steps_so_far.append(ops.grow_tree_step(*on_device(probs, ids), steps_so_far[-1]))
    for expected, actual in zip(grown[REFERENCE], grown[TRITON], strict=True):
        assert_same(expected, actual)
    drafts = min(steps * topk, topk + (steps - 1) * topk * topk)
    assert_same(REFERENCE.organize_draft_tree(grown[REFERENCE], drafts + 1),
                TRITON.organize_draft_tree(grown[TRITON], drafts + 1))


def test_grow_tree_step_rejects_what_the_reference_rejects():
    from eagle_hal.hal.sampling import TreeConfigError

    first = TRITON.grow_tree_step(*on_device(torch.rand(2, 3), torch.zeros(2, 3, dtype=torch.long)),
                                  None)
    with pytest.raises(TreeConfigError, match="depth 2"):
        TRITON.grow_tree_step(*on_device(torch.rand(6, 2), torch.zeros(6, 2, dtype=torch.long)),
                              first)


def test_grow_tree_step_ranks_nan_first_as_the_reference():
    """A NaN score (a NaN draft state) sorts first in the reference; the kernel agrees, and
    never picks past the candidates."""
    first = [ops.grow_tree_step(*on_device(torch.tensor([[0.5, 0.25]]),
                                           torch.tensor([[3, 4]])), None)
             for ops in (REFERENCE, TRITON)]
    probs = torch.tensor([[0.5, float("nan")], [0.25, 0.125]])
    ids = torch.tensor([[5, 6], [7, 8]])
    grown = [ops.grow_tree_step(*on_device(probs, ids), f)
             for ops, f in zip((REFERENCE, TRITON), first, strict=True)]
    assert_same(grown[0][2:5], grown[1][2:5])  # the frontier's tokens, branches, node ids
    torch.testing.assert_close(grown[0].scores, grown[1].scores, equal_nan=True, rtol=0, atol=0)
    assert torch.isnan(grown[1].scores[0, 0]) and grown[1].node_ids.max() < 7
    all_nan = torch.full((2, 2), float("nan"))
    grown = [ops.grow_tree_step(*on_device(all_nan, ids), f)
             for ops, f in zip((REFERENCE, TRITON), first, strict=True)]
    assert_same(grown[0][2:5], grown[1][2:5])


def _grown_steps(generator: torch.Generator, batch: int, topk: int, steps: int, nan: bool = False):
    """Reference-grown steps with probabilities in eighths (frequent ties), one NaN if asked."""
    def eighths(*shape: int) -> torch.Tensor:
        return torch.randint(0, 9, shape, generator=generator).float() / 8

    grown = [REFERENCE.grow_tree_step(eighths(batch, topk),
                                      torch.randint(0, 99, (batch, topk), generator=generator),
                                      None)]
    for depth in range(1, steps):
        probs = eighths(batch * topk, topk)
        if nan and depth == 1:
            probs[0, topk - 1] = float("nan")
        ids = torch.randint(0, 99, (batch * topk, topk), generator=generator)
        grown.append(REFERENCE.grow_tree_step(probs, ids, grown[-1]))
    return [type(s)(s.depth, *on_device(*s[1:])) for s in grown]


@pytest.mark.parametrize("batch,topk,steps", [(1, 1, 4), (2, 2, 3), (3, 4, 5), (2, 3, 4),
                                              (1, 8, 3), (2, 4, 8)])
def test_organize_draft_tree(batch, topk, steps):
    """The selected drafts, their verify-node parents and candidate ids equal the
    reference's for every N from 1 (no draft) to all candidates, ties to the lower id."""
    grown = _grown_steps(torch.Generator().manual_seed(batch * 100 + topk * 10 + steps),
                         batch, topk, steps)
    candidates = topk + (steps - 1) * topk * topk
    for drafts in sorted({0, 1, 2, topk, candidates // 2, candidates - 1, candidates}):
        if 0 <= drafts <= candidates:
            assert_same(REFERENCE.organize_draft_tree(grown, drafts + 1),
                        TRITON.organize_draft_tree(grown, drafts + 1))


def test_organize_draft_tree_nan_large_and_rejected():
    """A NaN score ranks first as in the reference's sort; past ORGANIZE_MAX_CANDIDATES
    candidates the reference's path answers, the same; too many drafts are rejected."""
    from eagle_hal.hal.sampling import TreeConfigError
    from eagle_hal.ops.triton.ops import ORGANIZE_MAX_CANDIDATES

    grown = _grown_steps(torch.Generator().manual_seed(7), 2, 3, 4, nan=True)
    assert torch.isnan(grown[1].candidate_scores).any()
    for drafts in (1, 5, 12):
        assert_same(REFERENCE.organize_draft_tree(grown, drafts + 1),
                    TRITON.organize_draft_tree(grown, drafts + 1))
    large = _grown_steps(torch.Generator().manual_seed(8), 1, 8, 6)  # 8 + 5 * 64 candidates
    assert 8 + 5 * 64 > ORGANIZE_MAX_CANDIDATES
    assert_same(REFERENCE.organize_draft_tree(large, 49), TRITON.organize_draft_tree(large, 49))
    with pytest.raises(TreeConfigError, match="must be in"):
        TRITON.organize_draft_tree(grown, 3 + 3 * 9 + 2)
