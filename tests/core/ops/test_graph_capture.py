"""The ops queue no host sync: one decode iteration's ops capture into a device graph whose
replay gives the eager results (reference and, where installed, Triton)."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.hal.tree_mask import TreeMaskMode

pytestmark = pytest.mark.gpu

BATCH, TOPK, STEPS, NODES, VOCAB, PADDED = 3, 3, 3, 8, 50, 64


def graph_api(device: torch.device):
    """The device module's graph class and capture context, found without naming a vendor."""
    module = torch.get_device_module(device)
    graph_class = getattr(module, f"{device.type.upper()}Graph", None)
    capture = getattr(module, "graph", None)
    if graph_class is None or capture is None:
        pytest.skip(f"torch.{device.type} offers no graph capture")
    return module, graph_class, capture


def implementations():
    from eagle_hal.ops.reference import ReferenceSamplingOps

    found = [ReferenceSamplingOps()]
    try:
        from eagle_hal.ops.triton import TritonSamplingOps
    except ImportError:
        return found
    return [*found, TritonSamplingOps()]


def one_iteration(ops, inputs: dict, table: torch.Tensor) -> list[torch.Tensor]:
    """Every op of a decode iteration on static inputs; returns all tensor outputs."""
    grown = [ops.grow_tree_step(inputs["root_probs"], inputs["root_ids"], None)]
    for depth in range(1, STEPS):
        grown.append(ops.grow_tree_step(inputs["probs"][depth], inputs["ids"][depth], grown[-1]))
    draft = ops.organize_draft_tree(grown, NODES)
    block = ops.build_verify_tree(inputs["root"], draft.tokens, draft.parents, inputs["seq_lens"],
                                  TreeMaskMode.TREE_BLOCK)
    packed = ops.build_verify_tree(inputs["root"], draft.tokens, draft.parents,
                                   inputs["seq_lens"], TreeMaskMode.BIT_PACKED)
    links = (block.tokens, block.retrieve_next_token, block.retrieve_next_sibling)
    predict = ops.masked_argmax(inputs["logits"], VOCAB)
    greedy = ops.verify_greedy(*links, predict, STEPS)
    probs = ops.target_probs(inputs["logits"], VOCAB, inputs["temperatures"], inputs["top_ks"],
                             inputs["top_ps"])
    noise = ops.sampling_noise(BATCH, NODES, device=inputs["root"].device,
                               seeds=inputs["seeds"], counter=inputs["counter"])
    sampled = ops.verify_tree_sampling(*links, probs, noise, STEPS)
    chain = ops.verify_chain_sampling(block.tokens[:, :3], probs[:, :2], probs[:, :3],
                                      noise._replace(accept_draws=noise.accept_draws[:, :3]))
    emitted = ops.fill_bonus_tokens(block.tokens, *sampled)
    path = ops.compact_accepted(block.tokens, sampled.accepted_nodes, sampled.accept_lens,
                                inputs["verify_slots"])
    ops.assign_verify_slots(table, inputs["pool"], inputs["seq_lens"],
                            inputs["verify_slots"].flatten())
    slots = ops.draft_kv_slots(inputs["scratch"], [g.parent_branches for g in grown], STEPS - 1)
    return [*block[:6], packed.tree_mask, predict, *greedy, probs, *noise, *sampled, *chain,
            emitted, *path, slots]


@pytest.mark.parametrize("ops", implementations(), ids=lambda ops: type(ops).__name__)
def test_iteration_replays_from_a_device_graph(ops):
    """Capture succeeds (no op syncs with the host) and replay equals an eager run."""
    if not torch.accelerator.is_available():
        pytest.skip("no accelerator")
    device = torch.accelerator.current_accelerator()
    module, graph_class, capture = graph_api(device)
    generator = torch.Generator(device=device).manual_seed(0)

    def rand(*shape):
        return torch.rand(*shape, generator=generator, device=device)

    inputs = {
        "root_probs": rand(BATCH, TOPK),
        "root_ids": torch.randint(0, VOCAB, (BATCH, TOPK), generator=generator, device=device),
        "probs": [None] + [rand(BATCH * TOPK, TOPK) for _ in range(1, STEPS)],
        "ids": [None] + [torch.randint(0, VOCAB, (BATCH * TOPK, TOPK), generator=generator,
                                       device=device) for _ in range(1, STEPS)],
        "root": torch.randint(0, VOCAB, (BATCH,), generator=generator, device=device),
        "seq_lens": torch.tensor([5, 0, 9], device=device),
        "logits": torch.randn(BATCH, NODES, PADDED, generator=generator, device=device),
        "temperatures": torch.tensor([0.0, 1.0, 0.7], device=device),
        "top_ks": torch.tensor([0, 5, 0], device=device),
        "top_ps": torch.tensor([1.0, 0.9, 0.8], device=device),
        "seeds": torch.tensor([11, 12, 13], device=device),
        "counter": torch.tensor([1, 2, 3], device=device),
        "verify_slots": torch.arange(BATCH * NODES, device=device).view(BATCH, NODES),
        "pool": torch.tensor([2, 0, 1], device=device),
        "scratch": torch.arange(BATCH * STEPS * TOPK, device=device).view(BATCH, STEPS, TOPK),
    }
    table = torch.zeros(3, 32, dtype=torch.int32, device=device)

    side = module.Stream()
    side.wait_stream(module.current_stream())
    with module.stream(side):  # warm up (compiles kernels) off the capture stream
        one_iteration(ops, inputs, table)
    module.current_stream().wait_stream(side)
    graph = graph_class()
    with capture(graph):
        captured = one_iteration(ops, inputs, table)
    table.zero_()
    graph.replay()
    torch.accelerator.synchronize()
    replayed = [t.clone() for t in captured]
    replayed_table = table.clone()
    table.zero_()
    eager = one_iteration(ops, inputs, table)
    torch.accelerator.synchronize()
    assert len(replayed) == len(eager)
    for index, (r, e) in enumerate(zip(replayed, eager, strict=True)):
        assert torch.equal(r, e), f"output {index} differs after replay"
    assert torch.equal(replayed_table, table)
