"""The EAGLE-1 loss against an explicit per-position loop.

Oracle: for every sequence, unpadded, the draft reads token ``x[i + 1]`` with feature
``f[i]``; each position whose predicted token ``x[i + 2]`` lies in the answer contributes
smooth-L1(predicted, f[i + 1]) (mean over hidden units) and the soft cross-entropy against
softmax(lm_head(f[i + 1])). Written as a Python loop over rows and positions.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from eagle_hal.testing.models import tiny_eagle1, tiny_target
from eagle_hal.train.dataset import PaddedRows
from eagle_hal.train.dense import draft_forward, target_features
from eagle_hal.train.loss import eagle1_loss

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
