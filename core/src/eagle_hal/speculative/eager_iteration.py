"""One speculative iteration without overlap: draft -> verify -> accept -> draft extend.

``EagleWorker.decode`` dispatches each call: an iteration in flight continued or applied
(``speculative.speculative_overlap``), plain decoding with one iteration in flight
(``speculative.overlap``), or, everywhere else (the first iteration of a batch, the timed split
pass, devices or layouts that cannot overlap, S = 0 without overlap), the iteration here,
which the host builds from what it read back and reads back before returning. The steps
are those of ``speculative.worker``'s docstring (1-5); the one host sync is step 4's read-back.
The worker's phase times (``IterationTimes``, when ``worker.timed``) and the adaptive
controller's observation are taken here, around the phases.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from eagle_hal.engine.request import Request
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.speculative.acceptance import accept_tree
from eagle_hal.speculative.drafting import DraftInputs, draft_tree, single_node_tree

if TYPE_CHECKING:
    from eagle_hal.speculative.worker import EagleWorker

__all__ = ["decode_eager"]


def decode_eager(worker: EagleWorker, requests: Sequence[Request], steps: int, start: float,
                 since: float) -> list[list[int]]:
    """Run one iteration at depth ``steps`` for ``requests`` and return each request's
    emitted tokens. ``start``: when the call began (the phase split's origin); ``since``:
    when the controller's period began (``ControllerReports.begin``)."""
    batch_size = len(requests)
    runner, ops = worker.runner, worker.ops
    worker.iterations_at_depth[steps] += 1
    spec = worker._spec_at(steps, batch_size)
    num_nodes = spec.draft_tokens if steps > 0 else 1
    topk = spec.topk if steps > 0 else 1
    shape = TreeShape(spec.topk, steps, num_nodes)
    rows = [worker._row(r) for r in requests]
    seq_lens = [r.cached_len for r in requests]
    reserve = max(num_nodes, steps * topk)
    for row, seq_len in zip(rows, seq_lens, strict=True):
        runner.table.reserve(row, seq_len + reserve)
    # Everything the iteration needs from the host, in one copy: the reserved block's
    # slots (verify nodes and draft scratch share it), the draft steps' positions and
    # the device table's new entries.
    host_slots = runner.host_slots(rows, seq_lens, reserve)  # [B * reserve]
    draft_positions = [
        s + d for d in range(max(steps - 1, 0)) for s in seq_lens for _ in range(topk)
    ]  # [S - 1, B * K] step-major
    uploaded = runner.upload_with_table(
        rows, seq_lens, [r.output_ids[-1] for r in requests], host_slots,
        [topk] * batch_size, [num_nodes] * batch_size, draft_positions,
    )
    rows_t, seq_t, roots, slots_t, branches_t, nodes_t, positions_t = uploaded
    slots = slots_t.view(batch_size, reserve)
    t_prepared = worker._tick(start)
    caught_up = steps > 0 and worker.catch_up(requests)
    if caught_up and worker.controller is not None:
        # the controller charges the catch-up to the probe, so time it apart
        runner.backend.synchronize()
    t_catch_up = worker._tick(t_prepared)
    
    # 1-2. draft the tree and lay it out for verification
    if steps > 0:
        inputs = DraftInputs(
            rows, seq_lens, rows_t, seq_t, branches_t, slots,
            positions_t.view(max(steps - 1, 0), batch_size * topk), roots,
            worker.draft_states(requests),
        )
        tree = draft_tree(runner, ops, shape, inputs)
    else:
        tree = single_node_tree(roots, seq_t, runner.tree_mask_mode, worker._one_node)
    t_draft = worker._tick(t_catch_up)
    
    # 3. verify
    verify_slots = slots[:, :num_nodes]  # [B, N] node i's slot is position seq_len + i
    mode = ForwardMode.TARGET_VERIFY if num_nodes > 1 else ForwardMode.DECODE
    batch = runner.make_batch(
        mode, input_ids=tree.tokens, positions=tree.positions, rows=rows,
        prefix_lens=seq_lens, extend_lens=[num_nodes] * batch_size,
        out_cache_loc=verify_slots, tree_mask=tree.tree_mask if num_nodes > 1 else None,
        device_lens=(rows_t, seq_t, nodes_t),
    )
    out = runner.run_target(batch, worker.aux_layers)
    logits = runner.target.compute_logits(out.hidden_states).view(batch_size, num_nodes, -1)
    t_verify = worker._tick(t_draft)
    
    # 4. accept; read back lengths, bonus tokens, accepted nodes and the tree's tokens
    # in the one host sync of the iteration, then move off-place KV and free the rest
    result = accept_tree(
        ops, logits, worker.vocab_size, tree.tokens, tree.retrieve_next_token,
        tree.retrieve_next_sibling, steps, worker._sampling(requests),
        2 * seq_t if not worker._all_greedy(requests) else seq_t,
    )
    width = result.accepted_nodes.shape[1]
    readback = torch.cat(
        [result.accept_lens.long().view(-1, 1), result.bonus_tokens.long().view(-1, 1),
         result.accepted_nodes.long(), tree.tokens.long()], dim=1,
    ).tolist()  # [B, 2 + W + N]
    accept_lens = [row[0] for row in readback]
    paths = [row[2 : 2 + n] for row, n in zip(readback, accept_lens, strict=True)]  # accepted nodes
    emitted = [
        [row[2 + width + node] for node in path[1:]] + [row[1]]
        for row, path in zip(readback, paths, strict=True)
    ]
    moves = [
        (host_slots[b * reserve + node], host_slots[b * reserve + j])
        for b, path in enumerate(paths) for j, node in enumerate(path) if node != j
    ]  # (source, destination) slot of every accepted node not yet in place
    in_place = not moves
    hidden_rows = [b * num_nodes + node for b, path in enumerate(paths) for node in path]
    if moves or (worker.has_draft and steps > 0 and batch_size > 1):
        sources, destinations, hidden_index = runner.upload(
            [m[0] for m in moves], [m[1] for m in moves], hidden_rows
        )
        runner.target_kv.move_kv(sources, destinations)
    for request, seq_len, n in zip(requests, seq_lens, accept_lens, strict=True):
        request.cached_len = seq_len + n  # the root and n - 1 accepted drafts
    # in reverse, so that the next iteration's reserves get the same slots back (LIFO)
    for request, row in reversed(list(zip(requests, rows, strict=True))):
        runner.table.truncate(row, request.cached_len)
    t_accept = worker._tick(t_verify)
    
    # 5. draft extend over the emitted tokens, fed the accepted nodes' target features;
    # at S = 0 only remember them (every request emitted one token, its feature is row b)
    if worker.has_draft and steps == 0:
        features = runner.draft.project_target_features(out)  # [B, H]
        worker._pending.add(
            [r.request_id for r in requests], seq_lens, [row[0] for row in emitted], features
        )
    elif worker.has_draft:
        features = runner.draft.project_target_features(out)  # [B * N, H]
        if batch_size == 1 and in_place:
            features = features[: accept_lens[0]]
        else:
            features = features[hidden_index]
        ids = [t for row in emitted for t in row]
        worker._draft_extend(requests, rows, ids, features, seq_lens, accept_lens)
    t_extend = worker._tick(t_accept)
    
    if worker.controller is not None:
        mean_accept = sum(accept_lens) / batch_size
        worker._observe(
            batch_size, steps, mean_accept, t_extend - since,
            t_catch_up - start if caught_up else 0.0,
        )
    if worker.timed:
        worker.times.draft += t_draft - t_catch_up
        worker.times.verify += t_verify - t_draft
        worker.times.accept += t_accept - t_verify
        worker.times.draft_extend += t_extend - t_accept + t_prepared - start
        worker.times.catch_up += t_catch_up - t_prepared
        worker.times.iterations += 1
    return emitted
