"""The unrolled draft forward equals the engine's own draft chain, step by step, for EAGLE-1
and EAGLE-3 heads.

Oracle: the inference path on the CPU backend (ModelRunner, paged KV, the reference
attention backend), driven as ``speculative.drafting.draft_chain`` drives it: a DRAFT_EXTEND over
the prefix ``0 .. o`` with the target's features, then one DRAFT_DECODE per depth, each
reading the next true token with the previous output and attending to the prefix plus the
chain's scratch slots. Its depth-``s`` output must equal ``g_s[o + s - 1]`` of one dense
unrolled pass. Tolerance: atol 1e-5 in float32.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.engine.runner import CacheConfig, ModelRunner
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.llama import ModelOutput
from eagle_hal.testing.models import randomize, tiny_eagle1, tiny_target
from eagle_hal.train.dense import dense_batch, target_features
from eagle_hal.train.eagle3 import init_eagle3
from eagle_hal.train.unrolled import DenseUnrolledAttention, unrolled_draft_forward

ATOL = 1e-5
STEPS = 4
ORIGINS = [0, 3, 7]  # chain origins o (draft positions whose extend output starts the chain)


def _models(variant="eagle1"):
    """A tiny target and head; the head's weights are small enough that its own outputs
    stay of order 1 over several steps (float32 error stays ~1e-6). EAGLE-3 needs a target
    deep enough for its feature layers (2, 4, 5); ``eagle1-stacked`` is an EAGLE-1 head of
    three layers with 24-wide MLPs."""
    if variant == "eagle3":
        target = tiny_target(seed=61, vocab=97, layers=8)
        head = init_eagle3(target, seed=62)
    else:
        target = tiny_target(seed=61, vocab=97, layers=2)
        stacked = variant == "eagle1-stacked"
        head = tiny_eagle1(target, seed=62, layers=3 if stacked else 1,
                           intermediate_size=24 if stacked else 64)
    randomize(head, seed=62, scale=0.12)
    return target, head


def _draft_features(target, head, rows):
    """What the head's first step reads at every position: ``[B, L, H]``."""
    hidden = head.config.hidden_size
    streams = target_features(target, rows, head.aux_layers)  # [B, L, (k + 1) H]
    layers = ModelOutput(streams[..., -hidden:], tuple(streams[..., :-hidden].split(hidden, -1)))
    return head.project_target_features(layers)


@pytest.fixture(scope="module")
def rows():
    return torch.randint(0, 97, (2, 12), generator=torch.Generator().manual_seed(8))


def _engine_chain(runner, tokens, features, origin, steps):
    """Depth 1 .. ``steps`` outputs of the inference chain starting at draft position
    ``origin`` of one sequence, the draft reading the true tokens."""
    row = runner.table.add_request()
    runner.table.reserve(row, origin + steps)
    runner.sync_table()
    extend = runner.causal_batch(
        ForwardMode.DRAFT_EXTEND, tokens[1 : origin + 2], [row], [0], [origin + 1]
    )
    hidden = runner.run_draft(extend, features[: origin + 1])[-1:]  # [1, H] g_1[o]
    outputs = [hidden]
    scratch = runner.long(runner.host_slots([row], [origin + 1], steps - 1))  # [S - 1]
    for depth in range(1, steps):  # draft_chain's depth_index = depth - 1
        batch = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=tokens[origin + depth + 1 : origin + depth + 2],
            positions=runner.long([origin + depth]),
            table_rows=[row],
            prefix_lens=[origin + 1],
            extend_lens=[1],
            out_cache_loc=scratch[depth - 1 : depth],
            draft_kv_slots=scratch[None, :depth].to(runner.slot_dtype),
            num_branches=1,
        )
        hidden = runner.run_draft(batch, hidden)
        outputs.append(hidden)
    return outputs


@pytest.mark.parametrize("variant", ["eagle1", "eagle1-stacked", "eagle3"])
def test_unrolled_steps_match_the_engine_chain(cpu_backend, rows, variant):
    """For several origins and both rows, g_s[o + s - 1] equals the engine's depth-s output
    (EAGLE-3: step 1 reads fc of the target's layer streams, later steps the head's own
    output before its norm, as the engine feeds them; a stacked head through every layer,
    each with its own training and draft KV)."""
    target, head = _models(variant)
    with torch.no_grad():
        features = _draft_features(target, head, rows)  # [B, L, H]
        unrolled = unrolled_draft_forward(head, rows[:, 1:], features[:, :-1], STEPS)
    cache = CacheConfig(num_tokens=256, page_size=4, max_requests=8, max_context=64)
    runner = ModelRunner(cpu_backend, target, head, cache, torch.float32)
    checked = 0
    for b in range(rows.shape[0]):
        for origin in ORIGINS:
            chain = _engine_chain(runner, rows[b], features[b], origin, STEPS)
            for step, expected in enumerate(chain, start=1):
                got = unrolled[step - 1][b, origin + step - 1]
                torch.testing.assert_close(got, expected[0], atol=ATOL, rtol=0)
                checked += 1
    assert checked == 2 * len(ORIGINS) * STEPS
    # later steps really differ from the teacher-forced pass (the oracle can tell them apart)
    assert not torch.allclose(unrolled[1][:, 1:], unrolled[0][:, 1:], atol=1e-3)


def test_gradient_flows_through_fed_back_features(rows):
    """Step 2 at i depends on step 1's output at i - 1 (not detached); all head weights
    get gradients from a later step's output."""
    target, head = _models()  # unfused: the engine fuses a head's projections
    with torch.no_grad():
        features = target_features(target, rows)
    outputs = unrolled_draft_forward(head, rows[:, 1:], features[:, :-1], 3)
    (through,) = torch.autograd.grad(outputs[1][:, 5].sum(), outputs[0], retain_graph=True)
    assert through[:, 4].abs().sum() > 0
    assert through[:, 6:].abs().sum() == 0  # nothing after the query position
    outputs[2][:, 6].sum().backward()
    for name, param in head.named_parameters():
        assert param.grad is not None and param.grad.abs().sum() > 0, name


def test_unrolled_attention_refuses_misuse():
    """A step without the K/V of the steps before it, or another rectangle, is refused."""
    attn = DenseUnrolledAttention(4, 2, 8, 8**-0.5)
    batch = dense_batch(torch.zeros(2, 3, dtype=torch.int64), ForwardMode.DRAFT_EXTEND)
    attn.plan(batch)
    batch.attn_metadata = attn.plan(batch)  # step 2, but step 1 never ran
    q, kv = torch.zeros(6, 4, 8), torch.zeros(6, 2, 8)
    with pytest.raises(RuntimeError, match="step 2"):
        attn.forward(0, q, kv, kv, batch)
    with pytest.raises(ValueError, match="rows"):
        attn.plan(dense_batch(torch.zeros(2, 4, dtype=torch.int64), ForwardMode.DRAFT_EXTEND))
    with pytest.raises(ValueError, match="steps"):
        unrolled_draft_forward(None, torch.zeros(1, 2, dtype=torch.int64), torch.zeros(1, 2, 8), 0)
