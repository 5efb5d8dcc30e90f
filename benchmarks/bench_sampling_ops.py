"""Time the SamplingOps: the pure-torch reference and the Triton kernels, per batch and tree size.

    python benchmarks/bench_sampling_ops.py --device cuda --out sampling_ops.json

For each batch size B and verify-tree size N it builds one realistic iteration (a grown and
organised draft tree, target logits favouring the drafts so walks go deep) and times every
op: median wall time of ``--repeats`` calls, each fenced by ``torch.accelerator.synchronize``
(so it includes launch overhead, as the engine sees it when not capturing graphs). Prints a
table and writes the rows as JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable

import torch
from eagle_hal import settings
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.reference import ReferenceSamplingOps


def synchronize(device: torch.device) -> None:
    if device.type != "cpu":
        torch.accelerator.synchronize(device)


def median_us(fn: Callable[[], object], device: torch.device, warmup: int, repeats: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def build_case(ops, device, batch, num_nodes, topk, steps, vocab, padded_vocab, seed=0):
    """One iteration's inputs: grown steps, the draft tree, verify tree, logits, probs."""
    generator = torch.Generator(device=device).manual_seed(seed)

    def draft_topk(rows: int):
        logits = torch.randn(rows, min(vocab, 4096), generator=generator, device=device)
        return torch.softmax(logits, dim=-1).topk(topk, dim=-1)

    probs, ids = draft_topk(batch)
    grown = [ops.grow_tree_step(probs, ids, None)]
    for _ in range(1, steps):
        probs, ids = draft_topk(batch * topk)
        grown.append(ops.grow_tree_step(probs, ids, grown[-1]))
    draft = ops.organize_draft_tree(grown, num_nodes)
    seq_lens = torch.randint(100, 2000, (batch,), generator=generator, device=device)
    root = torch.randint(0, vocab, (batch,), generator=generator, device=device)
    tree = ops.build_verify_tree(root, draft.tokens, draft.parents, seq_lens,
                                 TreeMaskMode.TREE_BLOCK)
    logits = torch.randn(batch, num_nodes, padded_vocab, generator=generator, device=device)
    # Favour each node's first child so that greedy and sampled walks go deep (worst case).
    first_child = tree.retrieve_next_token.clamp(min=0)
    child_token = tree.tokens.gather(1, first_child)
    logits.scatter_add_(2, child_token.unsqueeze(2),
                        torch.full((batch, num_nodes, 1), 30.0, device=device))
    logits = logits.bfloat16()
    return grown, draft, seq_lens, root, tree, logits


def bench_shape(implementations, device, batch, num_nodes, args) -> list[dict]:
    reference = implementations["reference"]
    grown, draft, seq_lens, root, tree, logits = build_case(
        reference, device, batch, num_nodes, args.topk, args.steps, args.vocab, args.padded_vocab)
    seq_lens_sum = int(seq_lens.sum())
    temperatures = torch.full((batch,), 0.8, device=device)
    top_ks = torch.full((batch,), 50, device=device, dtype=torch.long)
    top_ps = torch.full((batch,), 0.9, device=device)
    probs = reference.target_probs(logits, args.vocab, temperatures, top_ks, top_ps)
    noise = reference.sampling_noise(batch, num_nodes, device=device,
                                     generator=torch.Generator(device=device).manual_seed(1))
    predict = reference.masked_argmax(logits, args.vocab)
    accept = reference.verify_greedy(tree.tokens, tree.retrieve_next_token,
                                     tree.retrieve_next_sibling, predict, args.steps)
    verify_slots = torch.arange(batch * num_nodes, device=device).view(batch, num_nodes)
    req_to_token = torch.zeros(batch, 4096, dtype=torch.int32, device=device)
    pool = torch.arange(batch, device=device)
    scratch = torch.arange(batch * args.steps * args.topk, device=device, dtype=torch.int32)
    scratch = scratch.view(batch, args.steps, args.topk)
    parent_branches = [step.parent_branches for step in grown]
    chain_tokens = tree.tokens[:, : args.steps + 1]
    chain_draft = probs[:, : args.steps]
    chain_target = probs[:, : args.steps + 1]
    chain_noise = noise._replace(accept_draws=noise.accept_draws[:, : args.steps + 1])
    link_args = (tree.tokens, tree.retrieve_next_token, tree.retrieve_next_sibling)

    def ops_for(ops) -> dict[str, Callable[[], object]]:
        table = {
            "build_verify_tree[tree_block]": lambda: ops.build_verify_tree(
                root, draft.tokens, draft.parents, seq_lens, TreeMaskMode.TREE_BLOCK),
            "build_verify_tree[full]": lambda: ops.build_verify_tree(
                root, draft.tokens, draft.parents, seq_lens, TreeMaskMode.FULL, seq_lens_sum),
            "masked_argmax": lambda: ops.masked_argmax(logits, args.vocab),
            "verify_greedy": lambda: ops.verify_greedy(*link_args, predict, args.steps),
            "verify_tree_sampling": lambda: ops.verify_tree_sampling(
                *link_args, probs, noise, args.steps),
            "fill_bonus_tokens": lambda: ops.fill_bonus_tokens(
                tree.tokens, *accept),
            "assign_verify_slots": lambda: ops.assign_verify_slots(
                req_to_token, pool, seq_lens, verify_slots.flatten()),
            "draft_kv_slots": lambda: ops.draft_kv_slots(scratch, parent_branches, args.steps - 1),
            "sampling_noise[seeds]": lambda: ops.sampling_noise(
                batch, num_nodes, device=device, seeds=pool, counter=3),
        }
        if num_nodes <= 64:
            table["build_verify_tree[bit_packed]"] = lambda: ops.build_verify_tree(
                root, draft.tokens, draft.parents, seq_lens, TreeMaskMode.BIT_PACKED)
        if ops is reference:  # ops no kernel replaces: timed once
            table.update({
                "grow_tree_step": lambda: ops.grow_tree_step(
                    grown[1].candidate_scores[:, : args.topk].repeat_interleave(args.topk, 0),
                    grown[1].tokens.repeat_interleave(args.topk, 0), grown[0]),
                "organize_draft_tree": lambda: ops.organize_draft_tree(grown, num_nodes),
                "target_probs": lambda: ops.target_probs(
                    logits, args.vocab, temperatures, top_ks, top_ps),
                "verify_chain_sampling": lambda: ops.verify_chain_sampling(
                    chain_tokens, chain_draft, chain_target, chain_noise),
                "compact_accepted": lambda: ops.compact_accepted(
                    tree.tokens, accept.accepted_nodes, accept.accept_lens, verify_slots),
            })
        return table

    rows = []
    for name, ops in implementations.items():
        for op, fn in ops_for(ops).items():
            if args.ops and not any(op.startswith(prefix) for prefix in args.ops):
                continue
            micros = median_us(fn, device, args.warmup, args.repeats)
            rows.append({"op": op, "impl": name, "batch": batch, "num_draft_tokens": num_nodes,
                         "median_us": round(micros, 2)})
    return rows


def print_table(rows: list[dict]) -> None:
    shapes = sorted({(r["batch"], r["num_draft_tokens"]) for r in rows})
    keys = sorted({(r["op"], r["impl"]) for r in rows})
    value = {(r["op"], r["impl"], r["batch"], r["num_draft_tokens"]): r["median_us"] for r in rows}
    header = f"{'op':32} {'impl':9} " + " ".join(f"{f'B{b}/N{n}':>10}" for b, n in shapes)
    print(header)
    print("-" * len(header))
    for op, impl in keys:
        cells = [value.get((op, impl, b, n)) for b, n in shapes]
        print(f"{op:32} {impl:9} " + " ".join(
            f"{c:10.1f}" if c is not None else f"{'-':>10}" for c in cells))
    print("(median microseconds per call, synchronised)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    default_device = "cpu"
    if torch.accelerator.is_available():
        default_device = str(torch.accelerator.current_accelerator())
    parser.add_argument("--device", default=default_device)
    parser.add_argument("--out", default=None, help="write the rows as JSON here")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 64])
    parser.add_argument("--num-draft-tokens", type=int, nargs="+", default=[8, 32, 64])
    parser.add_argument("--topk", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--vocab", type=int, default=128000)
    parser.add_argument("--padded-vocab", type=int, default=128256)
    parser.add_argument("--repeats", type=int, default=50)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--no-triton", action="store_true", help="time the reference only")
    parser.add_argument("--ops", nargs="+", default=None, help="only ops starting with these")
    parser.add_argument("--num-warps", type=int, default=8)
    parser.add_argument("--vocab-block", type=int, default=4096)
    parser.add_argument("--vocab-chunk", type=int, default=16384)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    implementations: dict[str, object] = {"reference": ReferenceSamplingOps()}
    triton_note = "not requested"
    if not args.no_triton:
        if device.type == "cpu" and not settings.triton_interpreted():
            triton_note = "skipped: Triton needs an accelerator (or TRITON_INTERPRET=1)"
        else:
            try:
                from eagle_hal.ops.triton import TritonSamplingOps
            except ImportError as error:
                triton_note = f"skipped: {error}"
            else:
                implementations["triton"] = TritonSamplingOps(
                    args.num_warps, args.vocab_block, args.vocab_chunk)
                triton_note = "timed"
    print(f"device {device}, triton {triton_note}", file=sys.stderr)

    rows = []
    for batch in args.batch_sizes:
        for num_nodes in args.num_draft_tokens:
            rows += bench_shape(implementations, device, batch, num_nodes, args)
            print(f"done B={batch} N={num_nodes}", file=sys.stderr)
    print_table(rows)
    if args.out:
        meta = {"device": str(device), "torch": torch.__version__, "topk": args.topk,
                "steps": args.steps, "vocab": args.vocab, "padded_vocab": args.padded_vocab,
                "repeats": args.repeats, "triton": triton_note, "num_warps": args.num_warps,
                "vocab_block": args.vocab_block, "vocab_chunk": args.vocab_chunk}
        if device.type != "cpu":
            meta["device_name"] = torch.get_device_module(device).get_device_name(device)
        with open(args.out, "w") as handle:
            json.dump({"meta": meta, "rows": rows}, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
