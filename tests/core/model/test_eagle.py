"""EAGLE-1 and EAGLE-3 heads, loaded from directories laid out as the published checkpoints,
against a hand-written float64 dense oracle of the published computation.

The oracle re-derives each draft row from the checkpoint tensors alone: the layer input
(EAGLE-1: fc(cat(embed, feature)); EAGLE-3: cat(input_layernorm(embed), hidden_norm(feature))),
rotary by its definition, dense causal softmax attention over the row's own history, the
MLP, and the vocabulary head (EAGLE-3: own norm + lm_head, mapped through d2t). Target
features are Hugging Face's own (``last_hidden_state``; EAGLE-3: ``hidden_states[i]``).
Tolerance: atol 1e-4.
"""

from __future__ import annotations

import os
import random

import pytest
import torch
from eagle_hal.hal.attention import ForwardBatch, ForwardMode
from eagle_hal.model.eagle import Eagle1DraftModel, Eagle3DraftModel
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.model.loading.eagle_ckpt import load_eagle_head
from eagle_hal.model.loading.hf import load_hf_model

ATOL = 1e-4
H, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, DRAFT_VOCAB = 64, 4, 2, 16, 96, 97, 40
EPS, THETA = 1e-6, 10000.0


# -- the oracle ----------------------------------------------------------------------------

def rms(x, weight):
    x = x.double()
    return weight.double() * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def rope(x, positions):
    """Rotary by definition: dimension i pairs with i + D/2, angle pos * theta^(-2i/D)."""
    half = HEAD_DIM // 2
    inv = THETA ** (-torch.arange(half, dtype=torch.float64) * 2 / HEAD_DIM)
    angle = positions.double()[:, None] * inv[None]  # [T, half]
    cos, sin = angle.cos()[:, None], angle.sin()[:, None]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def dense_layer(w, prefix, attention_input, residual, positions):
    """One decoder layer (no input norm) over rows that each see all earlier rows."""
    n = attention_input.shape[0]
    lin = lambda x, name: x.double() @ w[f"{prefix}.{name}.weight"].double().T  # noqa: E731
    q = rope(lin(attention_input, "self_attn.q_proj").view(n, HEADS, HEAD_DIM), positions)
    k = rope(lin(attention_input, "self_attn.k_proj").view(n, KV_HEADS, HEAD_DIM), positions)
    v = lin(attention_input, "self_attn.v_proj").view(n, KV_HEADS, HEAD_DIM)
    k, v = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    scores = torch.einsum("qhd,khd->hqk", q, k) / HEAD_DIM**0.5
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    probs = torch.softmax(scores.masked_fill(~causal, float("-inf")), dim=-1)
    attended = torch.einsum("hqk,khd->qhd", probs, v).reshape(n, HEADS * HEAD_DIM)
    hidden = residual.double() + lin(attended, "self_attn.o_proj")
    normed = rms(hidden, w[f"{prefix}.post_attention_layernorm.weight"])
    mlp = lin(torch.nn.functional.silu(lin(normed, "mlp.gate_proj")) * lin(normed, "mlp.up_proj"),
              "mlp.down_proj")
    return hidden + mlp


class Oracle:
    """Draft rows computed densely from the checkpoint tensors; a row is
    (token, hidden-in, position) and sees the rows before it in its own history."""

    def __init__(self, variant, tensors, embed, layers=1):
        self.variant, self.w, self.embed, self.layers = variant, tensors, embed.double(), layers

    def layer_inputs(self, tokens, hidden):
        emb = self.embed[tokens]
        if self.variant == 1:
            fused = torch.cat([emb, hidden.double()], -1) @ self.w["fc.weight"].double().T
            fused = fused + self.w["fc.bias"].double()
            return fused, fused
        normed_emb = rms(emb, self.w["midlayer.input_layernorm.weight"])
        normed_hidden = rms(hidden, self.w["midlayer.hidden_norm.weight"])
        return torch.cat([normed_emb, normed_hidden], -1), hidden.double()

    def run(self, history):
        """Output of the last row of ``history`` (a list of rows)."""
        tokens = torch.tensor([t for t, _, _ in history])
        hidden = torch.stack([h.double() for _, h, _ in history])
        positions = torch.tensor([p for _, _, p in history])
        attention_input, residual = self.layer_inputs(tokens, hidden)
        prefix = "layers.0" if self.variant == 1 else "midlayer"
        out = dense_layer(self.w, prefix, attention_input, residual, positions)
        for i in range(1, self.layers):  # a stacked EAGLE-1 head: pre-norm Llama layers
            normed = rms(out, self.w[f"layers.{i}.input_layernorm.weight"])
            out = dense_layer(self.w, f"layers.{i}", normed, out, positions)
        return out[-1]

    def target_logits(self, out, lm_head=None, subset=None):
        if self.variant == 1:
            return out.double() @ lm_head.double().T
        draft = rms(out, self.w["norm.weight"]) @ self.w["lm_head.weight"].double().T
        full = torch.full((VOCAB,), float("-inf"), dtype=torch.float64)
        full[subset] = draft
        return full


# -- the runs ------------------------------------------------------------------------------

@pytest.fixture
def target(hf_tiny):
    hf_model, directory = hf_tiny("llama", seed=21, num_hidden_layers=4)
    return hf_model, load_hf_model(directory)


def fuse(kernels: str, *models) -> None:
    """Fuse ``models`` for inference with the named kernels (``unfused``: leave them)."""
    if kernels == "unfused":
        return
    if kernels == "triton":
        pytest.importorskip("triton")
        if os.environ.get("TRITON_INTERPRET") != "1" and not torch.accelerator.is_available():
            pytest.skip("Triton kernels need an accelerator or TRITON_INTERPRET=1")
        from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS as chosen
    else:
        from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS as chosen
    fuse_for_inference(chosen, *models)


@pytest.mark.parametrize("kernels", ["unfused", "triton"])
@pytest.mark.parametrize("variant,layers", [(1, 1), (1, 3), (3, 1)])
def test_head_loads_and_drafts_like_the_oracle(variant, layers, kernels, target, tmp_path,
                                                runtime_for, eagle_ckpt):
    """A published-layout head loads by name detection; DRAFT_EXTEND then two DRAFT_DECODE
    steps (K=2 branches, random parents) match the dense oracle; logits and top-k too —
    unfused, and fused for inference with the Triton model kernels. ``layers = 3``: an
    EAGLE-1 head of three stacked layers with a narrower MLP (40 against the target's 96),
    each layer keeping its K/V in its own layer of the draft's KV store."""
    hf_model, model = target
    directory = tmp_path / f"eagle{variant}"
    if variant == 1:
        ffn = FFN if layers == 1 else 40
        tensors, subset = eagle_ckpt.write_eagle1(directory, layers=layers, ffn=ffn), None
    else:
        tensors, subset = eagle_ckpt.write_eagle3(directory)
    head = load_eagle_head(directory, model)
    assert isinstance(head, Eagle1DraftModel if variant == 1 else Eagle3DraftModel)
    assert head.config.num_layers == layers
    fuse(kernels, model, head)
    oracle = Oracle(variant, tensors, model.model.embed_tokens.weight.detach(), layers)
    rng = random.Random(variant)
    prompts = [[rng.randrange(VOCAB) for _ in range(n)] for n in (6, 9)]

    target_rt = runtime_for(model.config)
    draft_rt = runtime_for(head.config, page_size=4)
    target_rows = [target_rt.new_request() for _ in prompts]
    draft_rows = [draft_rt.new_request() for _ in prompts]
    with torch.no_grad():
        out = model(target_rt.causal_batch(target_rows, prompts), target_rt.backend,
                    aux_layers=head.aux_layers)
        features = head.project_target_features(out)  # [T, H]
        # Prefill-style draft extend: token i+1 with the target's feature at position i.
        next_tokens = [rng.randrange(VOCAB) for _ in prompts]
        shifted = [p[1:] + [t] for p, t in zip(prompts, next_tokens, strict=True)]
        batch = draft_rt.causal_batch(draft_rows, shifted, mode=ForwardMode.DRAFT_EXTEND)
        draft_out = head(batch, draft_rt.backend, None, features)

    # The oracle's features come from Hugging Face's own forward of the target.
    with torch.no_grad():
        fused = []
        for prompt in prompts:
            hf_out = hf_model.model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
            if variant == 1:  # EAGLE-1: the final normed hidden state
                fused.append(hf_out.last_hidden_state[0].double())
            else:  # EAGLE-3: fc over the residual streams entering the aux layers
                streams = torch.cat([hf_out.hidden_states[i][0] for i in head.aux_layers], -1)
                fused.append(streams.double() @ tensors["fc.weight"].double().T)
    oracle_features = torch.cat(fused)
    histories, start = [], 0
    for prompt, tokens in zip(prompts, shifted, strict=True):
        rows = [(tokens[i], oracle_features[start + i], i) for i in range(len(tokens))]
        for i in range(len(rows)):
            torch.testing.assert_close(draft_out[start + i].double(), oracle.run(rows[: i + 1]),
                                       atol=ATOL, rtol=0)
        histories.append(rows)
        start += len(prompt)

    # Two DRAFT_DECODE steps, K=2 branches per request; step 2's parents are random. A
    # branch's history is its request's extended rows plus its ancestors' rows; each new
    # row's hidden input is the head's (already checked) output for its parent.
    branches, lm_head = 2, model.lm_head.weight.detach()
    ends = torch.cumsum(torch.tensor([len(t) for t in shifted]), 0).tolist()
    prefix_len = tuple(len(t) for t in shifted)
    assert len(set(prefix_len)) == 2  # ragged prefixes
    for row in draft_rows:
        draft_rt.table.reserve(row, draft_rt.table.length(row) + 2 * branches)
    # per request, per branch: (history rows, draft KV slots, output hidden)
    branch_state = [[(histories[b], [], draft_out[ends[b] - 1])] * branches
                    for b in range(len(draft_rows))]
    for step in range(2):
        tokens, positions, kv_slots, hidden_in, new_state = [], [], [], [], []
        for b, row in enumerate(draft_rows):
            new_state.append([])
            for k in range(branches):
                parent = k if step == 0 else rng.randrange(branches)
                history, slots, parent_hidden = branch_state[b][parent]
                token, position = rng.randrange(VOCAB), prefix_len[b] + step
                slot = draft_rt.table.slot(row, prefix_len[b] + step * branches + k)
                tokens.append(token)
                positions.append(position)
                kv_slots.append(slots + [slot])
                hidden_in.append(parent_hidden)
                new_state[b].append((history + [(token, parent_hidden, position)], slots + [slot]))
        batch = ForwardBatch(
            mode=ForwardMode.DRAFT_DECODE,
            input_ids=torch.tensor(tokens), positions=torch.tensor(positions),
            table_rows=torch.tensor(draft_rows), prefix_lens=torch.tensor(prefix_len),
            extend_lens=torch.tensor([branches] * len(draft_rows)),
            out_cache_loc=torch.tensor([s[-1] for s in kv_slots]),
            prefix_lens_cpu=prefix_len, extend_lens_cpu=(branches,) * len(draft_rows),
            draft_kv_slots=torch.tensor(kv_slots), num_branches=branches)
        with torch.no_grad():
            step_out = head(batch, draft_rt.backend, None, torch.stack(hidden_in))  # [B*K, H]
        for b in range(len(draft_rows)):
            for k in range(branches):
                history, slots = new_state[b][k]
                out_bk = step_out[b * branches + k]
                torch.testing.assert_close(out_bk.double(), oracle.run(history), atol=ATOL, rtol=0)
                branch_state[b][k] = (history, slots, out_bk)

    # Vocabulary: logits over the target vocabulary and top-k mapped to target ids.
    final = step_out  # [B * K, H]
    with torch.no_grad():
        logits = head.compute_logits(final)
        probs, ids = head.topk(final, 3)
    assert logits.dtype == torch.float32 and logits.shape == (final.shape[0], VOCAB)
    for r in range(final.shape[0]):
        expected = oracle.target_logits(final[r], lm_head, subset)
        finite = torch.isfinite(expected)
        assert torch.equal(torch.isfinite(logits[r]), finite)
        torch.testing.assert_close(logits[r][finite].double(), expected[finite], atol=ATOL, rtol=0)
        expected_probs = torch.softmax(expected[finite], -1)
        top = expected_probs.topk(3)
        torch.testing.assert_close(probs[r].double(), top.values, atol=1e-5, rtol=0)
        assert ids[r].tolist() == torch.nonzero(finite).flatten()[top.indices].tolist()


@pytest.mark.parametrize("variant", [1, 3])
def test_topk_takes_the_installed_softmax_topk(variant):
    """Fused with the Triton kernels, ``topk`` goes through their ``softmax_topk`` (once per
    call) and gives torch's softmax + topk: the same target ids, probabilities to 1e-5."""
    import dataclasses

    from eagle_hal.testing.models import randomize, tiny_config, tiny_eagle1, tiny_target

    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the tiny CPU models need TRITON_INTERPRET=1 for Triton kernels")
    from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

    target = tiny_target(seed=4, vocab=300)
    if variant == 1:
        head = tiny_eagle1(target, seed=5)
    else:
        head = Eagle3DraftModel(tiny_config(300, layers=1), target, draft_vocab_size=200,
                                dtype=torch.float32)
        randomize(head, 5)
        head.d2t.copy_(torch.randperm(300, generator=torch.Generator().manual_seed(6))[:200]
                       .sort().values - torch.arange(200))
    hidden = torch.randn(6, head.config.hidden_size, generator=torch.Generator().manual_seed(7))
    calls = []

    def counted(logits, k):
        calls.append(k)
        return TRITON_MODEL_KERNELS.softmax_topk(logits, k)

    with torch.no_grad():
        expected = [head.topk(hidden, k) for k in (1, 4)]
        fuse_for_inference(dataclasses.replace(TRITON_MODEL_KERNELS, softmax_topk=counted), head)
        got = [head.topk(hidden, k) for k in (1, 4)]
    assert calls == [1, 4]
    for (probs, ids), (expected_probs, expected_ids) in zip(got, expected, strict=True):
        assert torch.equal(ids, expected_ids)
        torch.testing.assert_close(probs, expected_probs, rtol=1e-5, atol=1e-7)
