"""The EAGLE-1 loss against an explicit per-position loop.

Oracle: for every sequence, unpadded, the draft reads token ``x[i + 1]`` with feature
``f[i]``; each position whose predicted token ``x[i + 2]`` lies in the answer contributes
smooth-L1(predicted, f[i + 1]) (mean over hidden units) and the soft cross-entropy against
softmax(lm_head(f[i + 1])). Written as a Python loop over rows and positions.

The unrolled loss: one step against ``eagle1_loss`` bit for bit; more steps against chains
grown by hand, one causal forward per depth over the prefix's true features followed by the
chain's own outputs (the inference chain written as one sequence), again a loop over rows,
positions and steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from eagle_hal.testing.models import randomize, tiny_eagle1, tiny_target
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import draft_forward, target_features
from eagle_hal.train.loss import eagle1_loss, unrolled_eagle1_loss

LENGTHS, STARTS = [11, 6, 9], [4, 3, 8]


def test_loss_matches_explicit_loop():
    """Regression, cross-entropy and top-1 counts equal the per-position oracle."""
    target = tiny_target(seed=41, vocab=53)
    head = tiny_eagle1(target, seed=42)
    gen = torch.Generator().manual_seed(7)
    width = max(LENGTHS)
    tokens = torch.randint(0, 53, (len(LENGTHS), width), generator=gen)
    for row, n in enumerate(LENGTHS):
        tokens[row, n:] = 0
    with torch.no_grad():
        features = target_features(target, tokens)
    rows = PaddedRows(tokens, torch.tensor(LENGTHS), torch.tensor(STARTS))
    parts = eagle1_loss(head, target, rows, features, cross_entropy_weight=0.1)

    regressions, entropies, correct = [], [], 0
    with torch.no_grad():
        for row, (n, start) in enumerate(zip(LENGTHS, STARTS, strict=False)):
            out = draft_forward(head, tokens[row : row + 1, 1:n], features[row : row + 1, : n - 1])[
                0
            ]
            for i in range(n - 1):
                if not start <= i + 2 <= n - 1:
                    continue
                true_next = features[row, i + 1]
                regressions.append(F.smooth_l1_loss(out[i], true_next))
                target_logits = true_next @ target.lm_head.weight.T
                draft_logits = out[i] @ target.lm_head.weight.T
                probs = torch.softmax(target_logits, -1)
                entropies.append(-(probs * torch.log_softmax(draft_logits, -1)).sum())
                correct += int(draft_logits.argmax() == target_logits.argmax())
    regression = torch.stack(regressions).mean()
    cross_entropy = torch.stack(entropies).mean()
    assert int(parts.count) == len(regressions) == 7 + 3 + 1
    assert int(parts.correct) == correct
    torch.testing.assert_close(parts.regression.detach(), regression, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(parts.cross_entropy.detach(), cross_entropy, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        parts.total.detach(), regression + 0.1 * cross_entropy, atol=1e-5, rtol=1e-5
    )


def test_noise_changes_only_the_input_features():
    """With noise the loss differs; the same generator seed reproduces it exactly."""
    target = tiny_target(seed=43, vocab=53)
    head = tiny_eagle1(target, seed=44)
    tokens = torch.randint(0, 53, (2, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        features = target_features(target, tokens)
    rows = PaddedRows(tokens, torch.tensor([8, 8]), torch.tensor([3, 3]))
    clean = eagle1_loss(head, target, rows, features).total
    noisy = [
        eagle1_loss(
            head,
            target,
            rows,
            features,
            noise_half_width=0.5,
            generator=torch.Generator().manual_seed(9),
        ).total
        for _ in range(2)
    ]
    assert not torch.equal(clean, noisy[0])
    assert torch.equal(noisy[0], noisy[1])


def _batch(seed, starts=STARTS, head_scale=None):
    """A tiny target, head, padded rows and the target's features."""
    target = tiny_target(seed=seed, vocab=53)
    head = tiny_eagle1(target, seed=seed + 1)
    if head_scale is not None:  # keeps the head's own outputs of order 1 over the steps
        randomize(head, seed=seed + 1, scale=head_scale)
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, 53, (len(LENGTHS), max(LENGTHS)), generator=gen)
    for row, n in enumerate(LENGTHS):
        tokens[row, n:] = 0
    with torch.no_grad():
        features = target_features(target, tokens)
    rows = PaddedRows(tokens, torch.tensor(LENGTHS), torch.tensor(starts))
    return target, head, rows, features


def test_one_step_unrolled_loss_is_eagle1_loss():
    """One unroll step gives eagle1_loss's numbers and gradients bit for bit (float32 and
    bf16 autocast, with noise drawn from the same seed)."""
    target, head, rows, features = _batch(45)
    params = list(head.parameters())
    for autocast in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            one = eagle1_loss(
                head, target, rows, features, noise_half_width=0.3,
                generator=torch.Generator().manual_seed(4),
            )
            unrolled = unrolled_eagle1_loss(
                head, target, rows, features, step_weights=(1.0,), noise_half_width=0.3,
                generator=torch.Generator().manual_seed(4),
            )
        assert torch.equal(unrolled.total, one.total)
        for field in ("regression", "cross_entropy", "correct", "count"):
            assert torch.equal(getattr(unrolled, field), getattr(one, field).reshape(1)), field
        expected = torch.autograd.grad(one.total, params)
        for got, want in zip(torch.autograd.grad(unrolled.total, params), expected, strict=True):
            assert torch.equal(got, want)


def _hand_chains(head, tokens, features, origin, steps):
    """Depth 1 .. ``steps`` outputs of the chain from draft position ``origin`` of one
    sequence: each depth one causal forward over the true features ``0 .. origin`` followed
    by the outputs of the depths before it."""
    fed = features[: origin + 1]
    outputs = []
    for depth in range(1, steps + 1):
        out = draft_forward(head, tokens[None, 1 : origin + depth + 1], fed[None])[0, -1]
        outputs.append(out)
        fed = torch.cat([fed, out[None]])
    return outputs


def test_unrolled_loss_matches_hand_grown_chains():
    """Each step's regression, cross-entropy, top-1 and count, and the weighted total,
    equal the per-position oracle over hand-grown chains."""
    weights = (1.0, 0.7, 0.5)
    target, head, rows, features = _batch(47, starts=[2, 3, 8], head_scale=0.12)
    parts = unrolled_eagle1_loss(
        head, target, rows, features, step_weights=weights, cross_entropy_weight=0.1
    )
    lm_head = target.lm_head.weight
    regressions, entropies = [[] for _ in weights], [[] for _ in weights]
    corrects = [0 for _ in weights]
    with torch.no_grad():
        for row, (n, start) in enumerate(zip(LENGTHS, rows.answer_starts.tolist(), strict=True)):
            for origin in range(n - 2):  # depths up to the last counted position n - 3
                depths = min(len(weights), n - 2 - origin)
                chain = _hand_chains(head, rows.tokens[row], features[row], origin, depths)
                for step, out in enumerate(chain):  # 0-based: unroll step step + 1
                    i = origin + step
                    if not (start - 2 <= i <= n - 3):
                        continue
                    true_next = features[row, i + 1]
                    target_logits, draft_logits = true_next @ lm_head.T, out @ lm_head.T
                    probs = torch.softmax(target_logits, -1)
                    regressions[step].append(F.smooth_l1_loss(out, true_next))
                    entropies[step].append(-(probs * torch.log_softmax(draft_logits, -1)).sum())
                    corrects[step] += int(draft_logits.argmax() == target_logits.argmax())
    total = torch.tensor(0.0)
    close = {"atol": 1e-5, "rtol": 1e-5}
    for step, weight in enumerate(weights):
        regression = torch.stack(regressions[step]).mean()
        entropy = torch.stack(entropies[step]).mean()
        torch.testing.assert_close(parts.regression[step].detach(), regression, **close)
        torch.testing.assert_close(parts.cross_entropy[step].detach(), entropy, **close)
        assert int(parts.correct[step]) == corrects[step]
        assert int(parts.count[step]) == len(regressions[step])
        total = total + weight * (regression + 0.1 * entropy)
    # rows count i in [0, 8], [1, 3], [6, 6]; step s drops the positions i < s - 1
    assert parts.count.tolist() == [9 + 3 + 1, 8 + 3 + 1, 7 + 2 + 1]
    torch.testing.assert_close(parts.total.detach(), total, **close)


def test_unrolled_loss_trains_every_step():
    """At three steps every head weight gets a gradient, and a few AdamW steps on one batch
    lower the total and each step's regression."""
    target, head, rows, features = _batch(49, head_scale=0.12)
    optimizer = torch.optim.AdamW(head.parameters(), lr=3e-3)
    first = None
    for _ in range(25):
        parts = unrolled_eagle1_loss(head, target, rows, features, step_weights=(1.0, 1.0, 1.0))
        optimizer.zero_grad(set_to_none=True)
        parts.total.backward()
        if first is None:
            first = parts
            for name, param in head.named_parameters():
                assert param.grad is not None and param.grad.abs().sum() > 0, name
        optimizer.step()
    assert parts.total < 0.7 * first.total
    assert bool((parts.regression < first.regression).all())
