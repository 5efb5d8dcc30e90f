"""Training an EAGLE-3 head: its initial weights and its loss.

Oracle for the loss: a per-position loop written out here, one unpadded sequence at a
time. The target's layer streams come from its own forward (``aux_layers``); the head's step
1 input at position ``i`` is ``fc`` of the 3 concatenated streams at ``i``, written as a
matrix product; the head's layer runs over the sequence (the dense draft forward, equal to
DRAFT_EXTEND); then, at each position whose predicted token lies in the answer, RMS norm
and ``lm_head`` by hand, log-softmax, and the cross-entropy against the softmax of the
target's ``lm_head`` over its next final state.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.model.eagle import Eagle3DraftModel
from eagle_hal.testing.models import randomize, tiny_target
from eagle_hal.train.dataset import DatasetInfo, DistillDataset
from eagle_hal.train.dense import DenseCausalAttention, dense_batch, draft_forward
from eagle_hal.train.eagle3 import init_eagle3, unrolled_eagle3_loss
from eagle_hal.train.features import FeatureStore

LENGTHS, STARTS = [11, 6, 9], [4, 3, 8]
INFO = DatasetInfo("tiny", "", 0, 3, 0, 8, (1.0,), (0.0,), 1.0, 0.0)


def _batch(seed):
    """An 8-layer target, a fresh EAGLE-3 head with livelier weights, the sequences, their
    padded rows and the FeatureStore's rows of them."""
    target = tiny_target(seed=seed, vocab=53, layers=8)
    head = init_eagle3(target, seed=seed + 1)
    randomize(head.midlayer, seed=seed + 2, scale=0.2)
    randomize(head.fc, seed=seed + 3, scale=0.1)
    gen = torch.Generator().manual_seed(seed)
    sequences = [torch.randint(3, 53, (n,), generator=gen).tolist() for n in LENGTHS]
    dataset = DistillDataset.from_sequences(sequences, STARTS, [False] * 3, [0.0] * 3, INFO)
    store = FeatureStore.compute(target, dataset, aux_layers=head.aux_layers, progress=False)
    indices = torch.arange(3)
    rows = dataset.padded(indices, "cpu")
    return target, head, sequences, rows, store.rows(indices, rows.tokens.shape[1])


def _rms_norm(x, weight, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight


def test_init_copies_the_target_readout():
    """Full vocabulary with identity id maps, the target's geometry and default feature
    layers; norm and lm_head equal the target's but are the head's own trainable copies;
    the rest drawn small (fc, projections) or 1 (norms); too shallow a target is refused."""
    target = tiny_target(seed=3, vocab=53, layers=8)
    head = init_eagle3(target, seed=4)
    assert isinstance(head, Eagle3DraftModel) and head.aux_layers == (2, 4, 5)
    assert head.draft_vocab_size == 53 and head.dtype == torch.float32
    assert torch.equal(head.d2t, torch.zeros(53, dtype=torch.int64)) and bool(head.t2d.all())
    assert torch.equal(head.norm.weight, target.model.norm.weight)
    assert torch.equal(head.lm_head.weight, target.lm_head.weight)
    assert head.lm_head.weight.data_ptr() != target.lm_head.weight.data_ptr()
    names = dict(head.named_parameters())
    assert "lm_head.weight" in names and "norm.weight" in names
    assert head.fc.weight.shape == (32, 96) and 0.015 < float(head.fc.weight.detach().std()) < 0.025
    for name in ("input_layernorm", "hidden_norm", "post_attention_layernorm"):
        assert bool((getattr(head.midlayer, name).weight == 1).all()), name
    with pytest.raises(ValueError, match="at least 4 layers"):
        init_eagle3(tiny_target(seed=3, vocab=53, layers=2), seed=4)


def test_step_one_loss_matches_a_brute_force_loop():
    """Cross-entropy, top-1 count and count of one step equal the per-position oracle; the
    regression part is zero; the gradient reaches fc, the layer and the readout."""
    target, head, sequences, rows, features = _batch(41)
    parts = unrolled_eagle3_loss(head, target, rows, features, cross_entropy_weight=0.7)

    fc, eps = head.fc.weight, target.config.rms_norm_eps
    entropies, correct = [], 0
    with torch.no_grad():
        for ids, start in zip(sequences, STARTS, strict=True):
            n = len(ids)
            tokens = torch.tensor([ids])
            out = target.forward(dense_batch(tokens), DenseCausalAttention.for_model(
                target.config), aux_layers=(2, 4, 5))
            streams = torch.cat(out.aux_hidden_states, dim=-1)  # [n, 96]
            final = out.hidden_states  # [n, 32]
            hidden_in = streams[: n - 1] @ fc.T  # [n - 1, 32] fc of the concatenated streams
            drafted = draft_forward(head, tokens[:, 1:], hidden_in[None])[0]  # [n - 1, 32]
            for i in range(n - 1):
                if not start <= i + 2 <= n - 1:
                    continue
                normed = _rms_norm(drafted[i], head.norm.weight, eps)
                draft_logits = normed @ head.lm_head.weight.T
                target_logits = final[i + 1] @ target.lm_head.weight.T
                probs = torch.softmax(target_logits, -1)
                entropies.append(-(probs * torch.log_softmax(draft_logits, -1)).sum())
                correct += int(draft_logits.argmax() == target_logits.argmax())
    entropy = torch.stack(entropies).mean()
    assert int(parts.count[0]) == len(entropies) == 7 + 3 + 1
    assert int(parts.correct[0]) == correct
    assert float(parts.regression[0]) == 0.0
    torch.testing.assert_close(parts.cross_entropy[0].detach(), entropy, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(parts.total.detach(), 0.7 * entropy, atol=1e-5, rtol=1e-5)
    parts.total.backward()
    for name in ("fc.weight", "midlayer.self_attn.q_proj.weight", "lm_head.weight"):
        assert dict(head.named_parameters())[name].grad.abs().sum() > 0, name


def test_noise_goes_on_fc_output_relative_to_its_rms(monkeypatch):
    """Step 1 reads fc's output plus uniform noise within relative_noise x its RMS (drawn
    again from the same seed, the same); without noise, fc's output itself."""
    import eagle_hal.train.eagle3 as eagle3

    target, head, _, rows, features = _batch(43)
    seen = []
    real = eagle3.unrolled_loss
    monkeypatch.setattr(eagle3, "unrolled_loss", lambda *a, **k: seen.append(a[3]) or real(*a, **k))
    losses = [
        unrolled_eagle3_loss(head, target, rows, features, relative_noise=noise,
                             generator=torch.Generator().manual_seed(9)).total
        for noise in (0.0, 0.5, 0.5)
    ]
    clean, noisy, again = (hidden.detach() for hidden in seen)
    with torch.no_grad():
        fc_out = features[:, :-1, :96] @ head.fc.weight.T  # [B, L - 1, 32]
    torch.testing.assert_close(clean, fc_out, atol=1e-6, rtol=1e-6)
    bound = 0.5 * float(fc_out.pow(2).mean().sqrt())
    assert 0.9 * bound < float((noisy - clean).abs().max()) <= bound * (1 + 1e-5)
    assert torch.equal(noisy, again) and torch.equal(losses[1], losses[2])
    assert not torch.equal(losses[0], losses[1])
