"""Area 2, sampling: every ``SamplingOps`` op of the backend against the pure-torch
reference on random cases (integer and bool outputs bit-exact, floats within the backend's
float32 tolerance), hand-worked golden cases, and the lossless-sampling statistics.

Inputs are made on the host from a seeded generator and the reference runs on the host;
the backend runs on its device. Each op is fed the reference's upstream outputs, so a
fault shows up in the op that has it. Statistical checks: Pearson chi-square at
ALPHA = 1e-4 each against exact laws worked out by enumeration; the two of them together
fail a correct backend with probability <= 2e-4 (fixed seeds: a given backend passes or
fails deterministically).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import pytest
import torch

from eagle_hal.conformance.compare import assert_close, assert_same, chi_square_pvalue
from eagle_hal.conformance.requirements import requires
from eagle_hal.hal.sampling import ACCEPT_DRAW_LIMIT, SamplingNoise
from eagle_hal.hal.tree_mask import TreeMaskMode

ALPHA = 1e-4
PAD = 3  # padded vocabulary entries, given large logits that must never win


class Case(NamedTuple):
    batch: int
    topk: int
    steps: int
    nodes: int
    vocab: int
    seed: int


CASES = [Case(3, 2, 3, 6, 40, 0), Case(4, 4, 3, 10, 50, 1), Case(2, 1, 4, 5, 30, 2),
         Case(5, 3, 2, 8, 64, 3)]
IDS = [f"B{c.batch}-K{c.topk}-S{c.steps}-N{c.nodes}" for c in CASES]


def _on(device: Any, *tensors: torch.Tensor) -> list[torch.Tensor]:
    return [t.to(device) for t in tensors]


def _topk_probs(
    gen: torch.Generator, rows: int, k: int, vocab: int
) -> tuple[torch.Tensor, torch.Tensor]:
    probs = torch.softmax(2.0 * torch.randn(rows, vocab, generator=gen), dim=-1)
    values, ids = probs.topk(k, dim=-1)  # [rows, k], distinct ids
    return values, ids


def _steps(case: Case, ref: Any) -> tuple[list[tuple[torch.Tensor, torch.Tensor]], list[Any]]:
    """Per-step top-k inputs and the reference TreeSteps they grow."""
    gen = torch.Generator().manual_seed(case.seed)
    inputs, steps = [], []
    for depth in range(case.steps):
        rows = case.batch if depth == 0 else case.batch * case.topk
        probs, ids = _topk_probs(gen, rows, case.topk, case.vocab)
        inputs.append((probs, ids))
        steps.append(ref.grow_tree_step(probs, ids, steps[-1] if steps else None))
    return inputs, steps


class Pipeline(NamedTuple):
    steps: list[Any]
    tree: Any  # DraftTree
    verify: Any  # VerifyTree (TREE_BLOCK)
    roots: torch.Tensor
    seq_lens: torch.Tensor
    logits: torch.Tensor  # [B, N, V + PAD]
    params: tuple[torch.Tensor, torch.Tensor, torch.Tensor]  # temperatures, top_ks, top_ps
    predict: torch.Tensor  # [B, N] target argmax, often matching a child


def _pipeline(case: Case, ref: Any) -> Pipeline:
    _, steps = _steps(case, ref)
    gen = torch.Generator().manual_seed(100 + case.seed)
    tree = ref.organize_draft_tree(steps, case.nodes)
    roots = torch.randint(0, case.vocab, (case.batch,), generator=gen)
    seq_lens = torch.randint(1, 20, (case.batch,), generator=gen)
    verify = ref.build_verify_tree(roots, tree.tokens, tree.parents, seq_lens,
                                   TreeMaskMode.TREE_BLOCK)
    logits = 3.0 * torch.randn(case.batch, case.nodes, case.vocab + PAD, generator=gen)
    logits[..., case.vocab :] = 50.0
    # The target agrees with a child 70% of the time, so accepted paths are long.
    child = verify.retrieve_next_token.clamp(min=0)
    child_token = torch.gather(verify.tokens, 1, child)
    agree = ((torch.rand(case.batch, case.nodes, generator=gen) < 0.7)
             & (verify.retrieve_next_token >= 0))
    predict = torch.where(agree, child_token,
                          torch.randint(0, case.vocab, child.shape, generator=gen))
    for b in range(case.batch):
        for i in range(case.nodes):
            logits[b, i, int(predict[b, i])] = 20.0
    temperatures = torch.tensor([0.0, 0.7, 1.0, 1.3, 0.5][: case.batch])
    top_ks = torch.tensor([0, 5, 0, 10, 3][: case.batch])
    top_ps = torch.tensor([1.0, 0.9, 0.8, 1.0, 0.95][: case.batch])
    return Pipeline(steps, tree, verify, roots, seq_lens, logits,
                    (temperatures, top_ks, top_ps), predict)


# -- the draft side ------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_grow_tree_step(
    ops: Any, reference_ops: Any, device: Any, tolerance: Any, case: Case
) -> None:
    """grow_tree_step at every depth: frontier and candidates as the reference."""
    inputs, steps = _steps(case, reference_ops)
    atol, rtol = tolerance("float32")
    for depth, (probs, ids) in enumerate(inputs):
        previous = None if depth == 0 else _step_on(steps[depth - 1], device)
        got = ops.grow_tree_step(*_on(device, probs, ids), previous)
        for field in ("tokens", "parent_branches", "node_ids", "candidate_tokens",
                      "candidate_parents"):
            assert_same(f"grow_tree_step depth {depth + 1}: {field}", getattr(got, field),
                        getattr(steps[depth], field))
        for field in ("scores", "candidate_scores"):
            assert_close(f"grow_tree_step depth {depth + 1}: {field}", getattr(got, field),
                         getattr(steps[depth], field), atol, rtol)


def _step_on(step: Any, device: Any) -> Any:
    return step._replace(**{f: getattr(step, f).to(device) for f in step._fields if f != "depth"})


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_organize_draft_tree(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """organize_draft_tree selects and orders the same drafts with the same parents."""
    _, steps = _steps(case, reference_ops)
    expected = reference_ops.organize_draft_tree(steps, case.nodes)
    got = ops.organize_draft_tree([_step_on(s, device) for s in steps], case.nodes)
    for field in expected._fields:
        assert_same(f"organize_draft_tree: {field}", getattr(got, field), getattr(expected, field))


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=requires(f"tree_mask:{m}")) for m in TreeMaskMode.ALL]
)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_build_verify_tree(
    ops: Any, reference_ops: Any, device: Any, case: Case, mode: str
) -> None:
    """build_verify_tree: tokens, positions, retrieve links and the mask, exactly."""
    p = _pipeline(case, reference_ops)
    total = int(p.seq_lens.sum())
    args = (p.roots, p.tree.tokens, p.tree.parents, p.seq_lens)
    expected = reference_ops.build_verify_tree(*args, mode, seq_lens_sum=total)
    got = ops.build_verify_tree(*_on(device, *args), mode, seq_lens_sum=total)
    for field in ("tokens", "positions", "retrieve_index", "retrieve_next_token",
                  "retrieve_next_sibling", "tree_mask"):
        assert_same(f"build_verify_tree[{mode}]: {field}", getattr(got, field),
                    getattr(expected, field))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_draft_kv_slots(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """draft_kv_slots at every step: each branch's ancestors' scratch slots, then its own."""
    _, steps = _steps(case, reference_ops)
    gen = torch.Generator().manual_seed(7 + case.seed)
    scratch = torch.randperm(1000, generator=gen)[: case.batch * case.steps * case.topk]
    scratch = scratch.view(case.batch, case.steps, case.topk)
    parents = [s.parent_branches for s in steps]
    for step in range(case.steps):
        expected = reference_ops.draft_kv_slots(scratch, parents, step)
        got = ops.draft_kv_slots(scratch.to(device), [t.to(device) for t in parents], step)
        assert_same(f"draft_kv_slots step {step}", got, expected)


# -- the target side -----------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_masked_argmax(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """masked_argmax ignores the padded tail, as the reference."""
    p = _pipeline(case, reference_ops)
    assert_same("masked_argmax", ops.masked_argmax(p.logits.to(device), case.vocab),
                reference_ops.masked_argmax(p.logits, case.vocab))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_target_probs(
    ops: Any, reference_ops: Any, device: Any, tolerance: Any, case: Case
) -> None:
    """target_probs with per-request temperature (0 included), top-k and top-p."""
    p = _pipeline(case, reference_ops)
    expected = reference_ops.target_probs(p.logits, case.vocab, *p.params)
    got = ops.target_probs(p.logits.to(device), case.vocab, *_on(device, *p.params))
    assert_close("target_probs", got, expected, *tolerance("float32"))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_target_probs_min_p(
    ops: Any, reference_ops: Any, device: Any, tolerance: Any, case: Case
) -> None:
    """target_probs with min-p beside temperature, top-k and top-p (min_ps is optional in
    the contract: a backend that implements target_probs must take it)."""
    p = _pipeline(case, reference_ops)
    min_ps = torch.tensor([0.0, 0.1, 0.3, 0.05, 0.6][: case.batch])
    expected = reference_ops.target_probs(p.logits, case.vocab, *p.params, min_ps=min_ps)
    got = ops.target_probs(p.logits.to(device), case.vocab, *_on(device, *p.params),
                           min_ps=min_ps.to(device))
    assert_close("target_probs(min_ps)", got, expected, *tolerance("float32"))


def test_golden_target_probs_min_p(ops: Any, device: Any) -> None:
    """min-p by hand: probabilities (0.5, 0.3, 0.15, 0.05) at temperature 1; min_p 0.25
    keeps what reaches 0.125 (the first three), min_p 0.5 keeps the first two after a
    top-k of 3, min_p 0 keeps all; one padded entry stays 0."""
    law = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = torch.cat([law.log(), torch.tensor([30.0])]).expand(3, 1, 5).contiguous()
    got = ops.target_probs(logits.to(device), 4, torch.ones(3, device=device),
                           torch.tensor([0, 3, 0], device=device),
                           torch.ones(3, device=device),
                           min_ps=torch.tensor([0.25, 0.5, 0.0], device=device)).cpu()
    expected = torch.tensor([
        [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0.0, 0.0],
        [0.5 / 0.8, 0.3 / 0.8, 0.0, 0.0, 0.0],
        [0.5, 0.3, 0.15, 0.05, 0.0],
    ])
    assert_close("target_probs(min_ps) golden", got[:, 0], expected, 1e-5, 1e-6)


def test_sampling_noise_seeded(ops: Any, reference_ops: Any, device: Any) -> None:
    """Seeded (counter-based) noise is bit-identical to the reference's; unseeded is in range."""
    seeds = torch.tensor([0, 1, 12345, 2**40 + 7])
    for counter in (0, 5, torch.tensor([3, 9, 0, 1])):
        expected = reference_ops.sampling_noise(4, 6, device="cpu", seeds=seeds, counter=counter)
        device_counter = counter.to(device) if isinstance(counter, torch.Tensor) else counter
        got = ops.sampling_noise(4, 6, device=device, seeds=seeds.to(device),
                                 counter=device_counter)
        assert_same(f"sampling_noise(counter={counter}): accept_draws", got.accept_draws,
                    expected.accept_draws)
        assert_same(f"sampling_noise(counter={counter}): bonus_draws", got.bonus_draws,
                    expected.bonus_draws)
    free = ops.sampling_noise(64, 8, device=device)
    draws = torch.cat([free.accept_draws.reshape(-1), free.bonus_draws]).cpu()
    assert bool(((draws >= 0) & (draws < ACCEPT_DRAW_LIMIT)).all()), (
        "unseeded draws out of [0, 2**62)"
    )


# -- acceptance and bookkeeping ------------------------------------------------------------


def _links(verify: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return verify.tokens, verify.retrieve_next_token, verify.retrieve_next_sibling


def _assert_accept(what: str, got: Any, expected: Any) -> None:
    for field in ("accept_lens", "accepted_nodes", "bonus_tokens"):
        assert_same(f"{what}: {field}", getattr(got, field), getattr(expected, field))


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_verify_greedy(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """verify_greedy accepts the same path, length and bonus as the reference."""
    p = _pipeline(case, reference_ops)
    expected = reference_ops.verify_greedy(*_links(p.verify), p.predict, case.steps)
    got = ops.verify_greedy(*_on(device, *_links(p.verify), p.predict), case.steps)
    _assert_accept("verify_greedy", got, expected)


def _noise(case: Case, reference_ops: Any) -> SamplingNoise:
    return reference_ops.sampling_noise(case.batch, case.nodes, device="cpu",
                                        seeds=torch.arange(case.batch) + 31 * case.seed, counter=11)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_verify_tree_sampling(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """verify_tree_sampling takes the same integer decisions from the same noise."""
    p = _pipeline(case, reference_ops)
    probs = reference_ops.target_probs(p.logits, case.vocab, *p.params)
    noise = _noise(case, reference_ops)
    expected = reference_ops.verify_tree_sampling(*_links(p.verify), probs, noise, case.steps)
    device_noise = SamplingNoise(*_on(device, *noise))
    got = ops.verify_tree_sampling(*_on(device, *_links(p.verify), probs), device_noise, case.steps)
    _assert_accept("verify_tree_sampling", got, expected)


def _chain_inputs(
    case: Case, reference_ops: Any
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(200 + case.seed)
    n, v = case.steps + 1, case.vocab
    draft_probs = torch.softmax(torch.randn(case.batch, n - 1, v, generator=gen), dim=-1)
    drafts = torch.multinomial(draft_probs.view(-1, v), 1, generator=gen).view(case.batch, n - 1)
    tokens = torch.cat([torch.randint(0, v, (case.batch, 1), generator=gen), drafts], dim=1)
    target = torch.softmax(torch.randn(case.batch, n, v, generator=gen), dim=-1)
    return tokens, draft_probs, target


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_verify_chain_sampling(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """verify_chain_sampling takes the same integer decisions from the same noise."""
    tokens, draft_probs, target = _chain_inputs(case, reference_ops)
    noise = reference_ops.sampling_noise(case.batch, case.steps + 1, device="cpu",
                                         seeds=torch.arange(case.batch), counter=3)
    expected = reference_ops.verify_chain_sampling(tokens, draft_probs, target, noise)
    got = ops.verify_chain_sampling(*_on(device, tokens, draft_probs, target),
                                    SamplingNoise(*_on(device, *noise)))
    _assert_accept("verify_chain_sampling", got, expected)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_bookkeeping(ops: Any, reference_ops: Any, device: Any, case: Case) -> None:
    """fill_bonus_tokens, compact_accepted and assign_verify_slots as the reference."""
    p = _pipeline(case, reference_ops)
    accepted = reference_ops.verify_greedy(*_links(p.verify), p.predict, case.steps)
    args = (p.verify.tokens, accepted.accepted_nodes, accepted.accept_lens, accepted.bonus_tokens)
    assert_same("fill_bonus_tokens", ops.fill_bonus_tokens(*_on(device, *args)),
                reference_ops.fill_bonus_tokens(*args))
    gen = torch.Generator().manual_seed(300 + case.seed)
    slots = torch.randperm(500, generator=gen)[: case.batch * case.nodes]
    slots = slots.view(case.batch, case.nodes)
    args = (p.verify.tokens, accepted.accepted_nodes, accepted.accept_lens, slots)
    expected, got = reference_ops.compact_accepted(*args), ops.compact_accepted(*_on(device, *args))
    for field in expected._fields:
        assert_same(f"compact_accepted: {field}", getattr(got, field), getattr(expected, field))
    rows = torch.randperm(8, generator=gen)[: case.batch]
    table = torch.zeros(8, 64, dtype=torch.int64)
    got_table = table.to(device)
    ops.assign_verify_slots(got_table, rows.to(device), p.seq_lens.to(device),
                            slots.reshape(-1).to(device))
    reference_ops.assign_verify_slots(table, rows, p.seq_lens, slots.reshape(-1))
    assert_same("assign_verify_slots: req_to_token after the write", got_table, table)


# -- golden cases, worked out by hand --------------------------------------------------------


def test_golden_grow_tree_step(ops: Any, device: Any) -> None:
    """K=2: scores 0.6*[0.5,0.5] and 0.4*[0.9,0.1] -> frontier (0.36, token 9), (0.3,
    token 7)."""
    first = ops.grow_tree_step(torch.tensor([[0.6, 0.4]], device=device),
                               torch.tensor([[3, 4]], device=device), None)
    second = ops.grow_tree_step(torch.tensor([[0.5, 0.5], [0.9, 0.1]], device=device),
                                torch.tensor([[7, 8], [9, 10]], device=device), first)
    assert_same("grow_tree_step golden: tokens", second.tokens, torch.tensor([[9, 7]]))
    assert_same("grow_tree_step golden: parent_branches", second.parent_branches,
                torch.tensor([[1, 0]]))
    assert_same("grow_tree_step golden: node_ids", second.node_ids, torch.tensor([[5, 3]]))
    assert_close("grow_tree_step golden: scores", second.scores, torch.tensor([[0.36, 0.3]]),
                 1e-6, 1e-5)


# Root (node 0) with children node 1 (token 5) and node 2 (token 6); node 1 has child node 3
# (token 7). Visibility: node i sees itself and its ancestors.
_GOLDEN_TOKENS = torch.tensor([[9, 5, 6, 7]])
_GOLDEN_NEXT = torch.tensor([[1, 3, -1, -1]])
_GOLDEN_SIBLING = torch.tensor([[-1, 2, -1, -1]])


@pytest.mark.parametrize(
    "mode", [pytest.param(m, marks=requires(f"tree_mask:{m}")) for m in TreeMaskMode.ALL]
)
def test_golden_verify_tree(ops: Any, device: Any, mode: str) -> None:
    """The hand tree's links, positions and mask in each layout."""
    tree = ops.build_verify_tree(torch.tensor([9], device=device),
                                 torch.tensor([[5, 6, 7]], device=device),
                                 torch.tensor([[0, 0, 1]], device=device),
                                 torch.tensor([2], device=device),
                                 mode, seq_lens_sum=2)
    assert_same("build_verify_tree golden: retrieve_next_token", tree.retrieve_next_token,
                _GOLDEN_NEXT)
    assert_same("build_verify_tree golden: retrieve_next_sibling", tree.retrieve_next_sibling,
                _GOLDEN_SIBLING)
    assert_same("build_verify_tree golden: positions", tree.positions, torch.tensor([[2, 3, 3, 4]]))
    block = torch.tensor([[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 1, 0, 1]], dtype=torch.bool)
    expected = {
        TreeMaskMode.TREE_BLOCK: block[None],
        TreeMaskMode.BIT_PACKED: torch.tensor([[1, 3, 5, 11]]),
        TreeMaskMode.FULL: torch.cat([torch.ones(4, 2, dtype=torch.bool), block],
                                     dim=1).reshape(-1),
    }[mode]
    assert_same(f"build_verify_tree golden: tree_mask[{mode}]",
                tree.tree_mask.reshape(expected.shape), expected)


def test_golden_verify_greedy(ops: Any, device: Any) -> None:
    """Target says 6 at the root and 8 at node 2: accept node 2, bonus 8 (2 tokens)."""
    predict = torch.tensor([[6, 7, 8, 1]], device=device)
    result = ops.verify_greedy(*_on(device, _GOLDEN_TOKENS, _GOLDEN_NEXT, _GOLDEN_SIBLING),
                               predict, 2)
    assert_same("verify_greedy golden: accept_lens", result.accept_lens, torch.tensor([2]))
    assert_same("verify_greedy golden: accepted_nodes", result.accepted_nodes,
                torch.tensor([[0, 2, -1]]))
    assert_same("verify_greedy golden: bonus_tokens", result.bonus_tokens, torch.tensor([8]))
    tied = torch.tensor([[1.0, 3.0, 3.0, 0.0, 9.0]], device=device)
    assert_same("masked_argmax golden: tie and padded tail", ops.masked_argmax(tied, 4),
                torch.tensor([1]))


# -- lossless sampling statistics ------------------------------------------------------------

SAMPLES = 8000


def _emitted(result: Any, tokens: torch.Tensor) -> list[tuple[int, ...]]:
    nodes, lens, bonus = (
        t.cpu() for t in (result.accepted_nodes, result.accept_lens, result.bonus_tokens)
    )
    tokens = tokens.cpu()
    out = []
    for b in range(nodes.shape[0]):
        path = [int(tokens[b, int(n)]) for n in nodes[b, 1 : int(lens[b])]]
        out.append((*path, int(bonus[b])))
    return out


def _count(sequences: list[tuple[int, ...]]) -> dict[tuple[int, ...], int]:
    counts: dict[tuple[int, ...], int] = {}
    for s in sequences:
        counts[s] = counts.get(s, 0) + 1
    return counts


def test_tree_sampling_is_lossless(ops: Any, device: Any) -> None:
    """verify_tree_sampling with the backend's own seeded noise emits the target's law."""
    from eagle_hal.conformance.laws import tree_law

    gen = torch.Generator().manual_seed(5)
    vocab = 6
    probs = torch.softmax(1.5 * torch.randn(5, vocab, generator=gen, dtype=torch.float64), dim=-1)
    # node 1 (2) and 2 (4) under the root; 3 (1), 4 (5) under 1
    tokens = torch.tensor([0, 2, 4, 1, 5])
    children = {0: {2: 1, 4: 2}, 1: {1: 3, 5: 4}}
    batch = SAMPLES
    noise = ops.sampling_noise(batch, 5, device=device, seeds=torch.arange(batch, device=device),
                               counter=1)
    result = ops.verify_tree_sampling(
        tokens.expand(batch, 5).to(device),
        torch.tensor([1, 3, -1, -1, -1]).expand(batch, 5).to(device),
        torch.tensor([-1, 2, -1, 4, -1]).expand(batch, 5).to(device),
        probs.float().expand(batch, 5, vocab).contiguous().to(device), noise, 2,
    )
    law = tree_law(children, probs.tolist())
    p = chi_square_pvalue(_count(_emitted(result, tokens.expand(batch, 5))), law, batch)
    assert p > ALPHA, (
        f"verify_tree_sampling: emitted tokens do not follow the target law (p = {p:.2e})"
    )


def test_chain_sampling_is_lossless(ops: Any, device: Any) -> None:
    """verify_chain_sampling with drafts drawn from q and generator noise emits the target's
    law."""
    from eagle_hal.conformance.laws import chain_law

    gen = torch.Generator().manual_seed(6)
    vocab, nodes, batch = 5, 3, SAMPLES
    target = torch.softmax(torch.randn(nodes, vocab, generator=gen, dtype=torch.float64), dim=-1)
    draft = torch.softmax(torch.randn(nodes - 1, vocab, generator=gen, dtype=torch.float64),
                          dim=-1)
    drafts = torch.stack([
        torch.multinomial(draft[i].float(), batch, replacement=True, generator=gen)
        for i in range(nodes - 1)
    ], dim=1)  # [batch, nodes - 1]
    tokens = torch.cat([torch.zeros(batch, 1, dtype=torch.int64), drafts], dim=1)
    torch.manual_seed(8)
    noise = ops.sampling_noise(batch, nodes, device=device)
    result = ops.verify_chain_sampling(
        tokens.to(device), draft.float().expand(batch, nodes - 1, vocab).contiguous().to(device),
        target.float().expand(batch, nodes, vocab).contiguous().to(device), noise,
    )
    law = chain_law(target.tolist(), draft.tolist())
    p = chi_square_pvalue(_count(_emitted(result, tokens)), law, batch)
    assert p > ALPHA, (
        f"verify_chain_sampling: emitted tokens do not follow the target law (p = {p:.2e})"
    )
