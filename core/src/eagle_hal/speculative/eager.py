"""The iteration without overlap: draft -> verify -> accept -> draft extend, in order.

The host builds the iteration from what it read back and reads back before returning. It
runs the first iteration of a batch, the benchmark's timed split pass, every iteration on
devices or layouts that cannot overlap, and S = 0 without overlap. For B requests, S draft
steps, top-k K, N verify nodes:

1. reserve ``max(N, S*K)`` positions past each request's cached length: the draft's
   scratch slots (draft KV store) and the verify slots (target KV store) share them, and
   upload everything the iteration needs from the host in one copy;
2. draft: S - 1 DRAFT_DECODE forwards grow the tree, then the N - 1 best nodes are laid
   out as the verify tree (root = the pending token; ``speculative.drafting``). At S = 0 a
   one-node tree, no draft. With a ``Drafter`` (``speculative.drafter``), its proposals
   instead, asked for before the reserve, which they size (S their depth, N the widest);
3. verify: one TARGET_VERIFY forward over the N nodes under the tree mask;
4. accept (greedy or lossless tree sampling; ``sample_tree``: the logit bias and penalties
   per node first, for a batch that sets them, and the logprobs of what was emitted for
   one that asks), read back in the iteration's one host sync;
   move the accepted nodes not already in place (never for plain decoding or chains) to
   the front and free the rest (truncate);
5. draft extend: the draft consumes the emitted tokens with the target's features of the
   accepted nodes, giving the next iteration's top-K and hidden state. At S = 0 the
   tokens and features are logged for the draft's catch-up instead.

Positions: the root sits at position ``seq_len`` (its KV is written by the verify); a draft
node at depth d has target position ``seq_len + d``. The draft reads token ``p + 1`` with the
target's feature at ``p``, so it runs a depth-d node at draft position ``seq_len + d - 1``.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request, TokenLogprobs
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import AcceptResult, TreeShape, VerifyTree
from eagle_hal.speculative import logprobs as _logprobs
from eagle_hal.speculative.acceptance import accept_tree
from eagle_hal.speculative.draft_tracker import table_row
from eagle_hal.speculative.drafter import Proposal, proposal_tree
from eagle_hal.speculative.drafting import DraftInputs, draft_tree, single_node_tree
from eagle_hal.speculative.iteration import DecodeBatch, IterationContext, Outputs

__all__ = ["EagerIteration", "sample_tree"]


def sample_tree(
    context: IterationContext,
    logits: torch.Tensor,
    requests: Sequence[Request],
    tree: VerifyTree,
    steps: int,
    counters: torch.Tensor,
) -> tuple[AcceptResult, list[list[TokenLogprobs]] | None]:
    """Accept from the target's ``logits [B, N, V]`` over ``tree`` (``accept_tree``), each
    node's logits through the logit bias and penalties of its own path first where a
    request sets them (``speculative.logits_processing``); with the logprobs of every
    emitted token, per request, where one asks (``speculative.logprobs``; else ``None``).
    Prefill (a one-node tree per request) and the eager iteration share it."""
    processed = logits
    if context.processing.needed(requests):
        processed = context.processing.apply(logits, requests, tree.tokens,
                                             tree.retrieve_next_token, tree.retrieve_next_sibling)
    sampling = context.sampling.of(requests)
    result = accept_tree(
        context.ops, processed, context.vocab_size, tree.tokens, tree.retrieve_next_token,
        tree.retrieve_next_sibling, steps, sampling, counters,
    )
    if not _logprobs.wanted(requests):
        return result, None
    return result, _logprobs.emitted_logprobs(context.ops, sampling, logits, processed,
                                              context.vocab_size, requests, tree.tokens, result)


class EagerIteration:
    """The reference iteration (see the module docstring). Holds nothing between calls."""

    def __init__(self, context: IterationContext) -> None:
        self.context = context

    def drain(self) -> list[tuple[Request, list[int]]]:
        return []

    def discard(self) -> None:
        pass

    def _propose(self, batch: DecodeBatch) -> list[Proposal] | None:
        """The ``Drafter``'s proposals for ``batch`` (``None``: no drafter, or S = 0). They
        take the place of the EAGLE head's draft: the verify, the accept and the KV moves
        are the same; a batch where none proposes anything runs as plain decoding."""
        drafter = self.context.drafter
        if drafter is None or batch.steps == 0:
            return None
        with self.context.timer.phase("draft"):
            if drafter.on_device:  # a model's drafter: it needs the requests' rows and lengths
                return drafter.propose_requests(batch.requests, batch.spec.shape)
            return drafter.propose([r.request_id for r in batch.requests],
                                   [r.all_ids for r in batch.requests], batch.spec.shape)

    def decode(self, batch: DecodeBatch) -> Outputs:
        context = self.context
        runner, ops, draft, timer = context.runner, context.ops, context.draft, context.timer
        requests, steps, spec, size = batch.requests, batch.steps, batch.spec, batch.size
        context.iterations_at_depth[steps] += 1
        timer.begin(batch.start)
        num_nodes = spec.draft_tokens if steps > 0 else 1
        topk = spec.topk if steps > 0 else 1
        proposals = self._propose(batch)
        if proposals is not None:  # a Drafter's trees: S their depth, N the widest + 1
            steps, topk = max(p.depth for p in proposals), 1
            num_nodes = 1 + max(len(p.tokens) for p in proposals)
        reserve = max(num_nodes, steps * topk)

        # 1. reserve, and everything the iteration needs from the host in one copy: the
        # reserved block's slots (verify nodes and draft scratch share it), the draft
        # steps' positions and the device table's new entries
        with timer.phase("other"):
            table_rows = [table_row(r) for r in requests]
            seq_lens = [r.cached_len for r in requests]
            for row, seq_len in zip(table_rows, seq_lens, strict=True):
                runner.table.reserve(row, seq_len + reserve)
            host_slots = runner.host_slots(table_rows, seq_lens, reserve)  # [B * reserve]
            draft_positions = [
                s + d for d in range(max(steps - 1, 0)) for s in seq_lens for _ in range(topk)
            ]  # [S - 1, B * K] step-major
            (table_rows_device, seq_lens_device, roots, slots_device, branches_device,
             nodes_device, positions_device) = (
                runner.upload_with_table(
                    table_rows, seq_lens, [r.output_ids[-1] for r in requests], host_slots,
                    [topk] * size, [num_nodes] * size, draft_positions,
                )
            )
            slots = slots_device.view(size, reserve)
        with timer.phase("catch_up"):
            caught_up = steps > 0 and draft.catch_up(requests)
            catch_up = 0.0
            if caught_up and context.controller is not None:
                # the controller charges the catch-up to the probe, so time it apart
                runner.backend.synchronize()
                catch_up = time.perf_counter() - batch.start

        # 2. draft the tree and lay it out for verification
        with timer.phase("draft"):
            if proposals is not None and steps > 0:
                tree = proposal_tree(ops, proposals, roots, seq_lens_device,
                                     runner.tree_mask_mode, sum(seq_lens))
            elif steps > 0:
                inputs = DraftInputs(
                    table_rows, seq_lens, table_rows_device, seq_lens_device, branches_device,
                    slots,
                    positions_device.view(max(steps - 1, 0), size * topk), roots,
                    draft.states_of(requests),
                )
                tree = draft_tree(runner, ops, TreeShape(steps, spec.topk, num_nodes), inputs)
            else:
                tree = single_node_tree(roots, seq_lens_device, runner.tree_mask_mode,
                                        context.one_node)

        # 3. verify
        with timer.phase("verify"):
            verify_slots = slots[:, :num_nodes]  # [B, N] node i's slot: position seq_len + i
            mode = ForwardMode.TARGET_VERIFY if num_nodes > 1 else ForwardMode.DECODE
            forward = runner.make_batch(
                mode, input_ids=tree.tokens, positions=tree.positions, table_rows=table_rows,
                prefix_lens=seq_lens, extend_lens=[num_nodes] * size,
                out_cache_loc=verify_slots, tree_mask=tree.tree_mask if num_nodes > 1 else None,
                device_lens=(table_rows_device, seq_lens_device, nodes_device),
            )
            out = runner.run_target(forward, context.aux_layers)
            logits = runner.target.compute_logits(out.hidden_states).view(size, num_nodes, -1)

        # 4. accept; read back lengths, bonus tokens, accepted nodes and the tree's tokens
        # in the one host sync of the iteration, then move off-place KV and free the rest
        with timer.phase("accept"):
            greedy = all(r.params.greedy for r in requests)
            result, logprobs = sample_tree(
                context, logits, requests, tree, steps,
                seq_lens_device if greedy else 2 * seq_lens_device,
            )
            if logprobs is not None:
                for request, entries in zip(requests, logprobs, strict=True):
                    request.pending_logprobs = entries
            width = result.accepted_nodes.shape[1]
            readback = torch.cat(
                [result.accept_lens.long().view(-1, 1), result.bonus_tokens.long().view(-1, 1),
                 result.accepted_nodes.long(), tree.tokens.long()], dim=1,
            ).tolist()  # [B, 2 + W + N]
            accept_lens = [line[0] for line in readback]
            paths = [line[2 : 2 + n] for line, n in zip(readback, accept_lens, strict=True)]
            emitted = [
                [line[2 + width + node] for node in path[1:]] + [line[1]]
                for line, path in zip(readback, paths, strict=True)
            ]
            moves = [
                (host_slots[b * reserve + node], host_slots[b * reserve + j])
                for b, path in enumerate(paths) for j, node in enumerate(path) if node != j
            ]  # (source, destination) slot of every accepted node not yet in place
            hidden_rows = [b * num_nodes + node for b, path in enumerate(paths) for node in path]
            if moves or (draft.enabled and steps > 0 and size > 1):
                sources, destinations, hidden_index = runner.upload(
                    [m[0] for m in moves], [m[1] for m in moves], hidden_rows
                )
                runner.target_kv.move_kv(sources, destinations)
            for request, seq_len, n in zip(requests, seq_lens, accept_lens, strict=True):
                request.cached_len = seq_len + n  # the root and n - 1 accepted drafts
            # in reverse, so that the next iteration's reserves get the same slots back
            for request, row in reversed(list(zip(requests, table_rows, strict=True))):
                runner.table.truncate(row, request.cached_len)

        # 5. draft extend over the emitted tokens, fed the accepted nodes' target
        # features; at S = 0 only log them (each request emitted one token, feature row b)
        with timer.phase("draft_extend"):
            if draft.enabled and steps == 0:
                features = runner.draft.project_target_features(out)  # [B, H]
                draft.pending.add(
                    [r.request_id for r in requests], seq_lens, [e[0] for e in emitted], features
                )
            elif draft.enabled:
                features = runner.draft.project_target_features(out)  # [B * N, H]
                if size == 1 and not moves:
                    features = features[: accept_lens[0]]
                else:
                    features = features[hidden_index]
                ids = [t for tokens in emitted for t in tokens]
                draft.extend(requests, ids, features, seq_lens, accept_lens)
            if context.drafter is not None:
                for request, tokens in zip(requests, emitted, strict=True):
                    context.drafter.observe(request.request_id, tokens)
        timer.count_iteration()
        accept = sum(accept_lens) / size if context.controller is not None else None
        return Outputs(emitted, accept, catch_up)
