"""Pure-torch bookkeeping around acceptance: bonus fill, path compaction, KV slots."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from eagle_hal.hal.sampling import NO_TOKEN, AcceptedPath, TreeConfigError
from eagle_hal.ops.reference_checks import check_dims, check_rows, check_same_shape

__all__ = ["assign_verify_slots", "compact_accepted", "draft_kv_slots", "fill_bonus_tokens"]


def _check_accept(tokens: torch.Tensor, accepted_nodes: torch.Tensor,
                  accept_lens: torch.Tensor) -> None:
    check_dims("tokens", tokens, 2)
    check_dims("accepted_nodes", accepted_nodes, 2)
    check_rows("accepted_nodes", accepted_nodes, tokens.shape[0])
    check_rows("accept_lens", accept_lens, tokens.shape[0])


def fill_bonus_tokens(
    tokens: torch.Tensor,
    accepted_nodes: torch.Tensor,
    accept_lens: torch.Tensor,
    bonus_tokens: torch.Tensor,
) -> torch.Tensor:
    _check_accept(tokens, accepted_nodes, accept_lens)
    check_rows("bonus_tokens", bonus_tokens, tokens.shape[0])
    width = accepted_nodes.shape[1]
    column = torch.arange(width, device=tokens.device)
    lens = accept_lens.long().unsqueeze(1)
    # Column j emits the draft of path entry j + 1 (entry 0 is the root).
    next_node = torch.cat([accepted_nodes[:, 1:], accepted_nodes[:, :1]], dim=1).clamp(min=0)
    drafts = tokens.long().gather(1, next_node)  # [B, W]
    emitted = torch.where(column < lens - 1, drafts, NO_TOKEN)
    return torch.where(column == lens - 1, bonus_tokens.long().unsqueeze(1), emitted)


def compact_accepted(
    tokens: torch.Tensor,
    accepted_nodes: torch.Tensor,
    accept_lens: torch.Tensor,
    verify_slots: torch.Tensor,
) -> AcceptedPath:
    _check_accept(tokens, accepted_nodes, accept_lens)
    check_same_shape(tokens=tokens, verify_slots=verify_slots)
    batch_size, num_nodes = tokens.shape
    width = accepted_nodes.shape[1]
    device = tokens.device
    column = torch.arange(width, device=device)
    valid = column < accept_lens.long().unsqueeze(1)  # [B, W]
    # Padding repeats the last accepted node so that every index stays gatherable.
    last = accepted_nodes.gather(1, (accept_lens.long() - 1).clamp(min=0).unsqueeze(1))
    nodes = torch.where(valid, accepted_nodes.long(), last)  # [B, W]
    path_tokens = torch.where(valid, tokens.long().gather(1, nodes), NO_TOKEN)
    hidden_index = nodes + num_nodes * torch.arange(batch_size, device=device).unsqueeze(1)
    # Path entry j goes to position seq_len + j, whose slot is verify slot j; padded columns
    # (and any past N) become self-moves.
    destination = verify_slots.gather(1, column.clamp(max=num_nodes - 1).expand(batch_size, -1))
    source = torch.where(valid, verify_slots.gather(1, nodes), destination)
    free_mask = torch.arange(num_nodes, device=device) >= accept_lens.long().unsqueeze(1)
    return AcceptedPath(path_tokens, hidden_index, source, destination, free_mask)


def assign_verify_slots(
    req_to_token: torch.Tensor,
    table_rows: torch.Tensor,
    seq_lens: torch.Tensor,
    out_cache_loc: torch.Tensor,
) -> None:
    check_dims("req_to_token", req_to_token, 2)
    batch_size = table_rows.shape[0]
    check_rows("seq_lens", seq_lens, batch_size)
    if batch_size == 0:
        return
    if out_cache_loc.dim() != 1 or out_cache_loc.shape[0] % batch_size:
        raise TreeConfigError(
            f"out_cache_loc must be [B * N] for B = {batch_size}, got {tuple(out_cache_loc.shape)}"
        )
    num_nodes = out_cache_loc.shape[0] // batch_size
    rows = table_rows.long().unsqueeze(1).expand(-1, num_nodes)
    columns = seq_lens.long().unsqueeze(1) + torch.arange(num_nodes, device=seq_lens.device)
    req_to_token[rows, columns] = out_cache_loc.view(batch_size, num_nodes).to(req_to_token.dtype)


def draft_kv_slots(
    scratch_slots: torch.Tensor, parent_branches: Sequence[torch.Tensor], step: int
) -> torch.Tensor:
    check_dims("scratch_slots", scratch_slots, 3)
    batch_size, num_steps, topk = scratch_slots.shape
    if not 0 <= step < num_steps or len(parent_branches) <= step:
        raise TreeConfigError(
            f"step {step} needs 0 <= step < S = {num_steps} and parent_branches for depths "
            f"1..{step + 1}; got {len(parent_branches)}"
        )
    branch = torch.arange(topk, device=scratch_slots.device).expand(batch_size, -1)  # [B, K]
    columns = [scratch_slots[:, step].gather(1, branch)]
    # Walk up: the frontier row at depth d + 1 hangs off row parent_branches[d] at depth d.
    for depth_index in range(step, 0, -1):
        branch = parent_branches[depth_index].long().gather(1, branch)
        columns.append(scratch_slots[:, depth_index - 1].gather(1, branch))
    slots = torch.stack(columns[::-1], dim=2)  # [B, K, step + 1]
    return slots.reshape(batch_size * topk, step + 1)
