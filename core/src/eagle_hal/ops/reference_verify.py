"""Pure-torch acceptance: greedy tree verification and lossless speculative sampling.

The tree walks loop over depth only; at each depth all children of the current node are
examined at once. Sampling decisions are exact integer comparisons (see
``eagle_hal.hal.sampling``), so a fused kernel can reproduce them bit for bit.
"""

from __future__ import annotations

import torch

from eagle_hal.hal.sampling import (
    ACCEPT_PROB_BITS,
    ACCEPT_UNIFORM_SHIFT,
    NO_NODE,
    AcceptResult,
    SamplingNoise,
    TreeConfigError,
)
from eagle_hal.ops.reference_checks import check_dims, check_same_shape

__all__ = [
    "parents_from_links",
    "quantize_probs",
    "sample_masses",
    "verify_chain_sampling",
    "verify_greedy",
    "verify_tree_sampling",
]

_PROB_SCALE = float(2**ACCEPT_PROB_BITS)


def quantize_probs(probs: torch.Tensor) -> torch.Tensor:
    """``floor(p * 2**ACCEPT_PROB_BITS)`` as int64 (exact: a power-of-two scale)."""
    return torch.floor(probs.float() * _PROB_SCALE).long()


def scale_draws(draws: torch.Tensor, bound: torch.Tensor) -> torch.Tensor:
    """Uniform integers in ``[0, bound)`` from draws in ``[0, 2**62)``: monotone in the
    draw, ``((draw >> 31) * bound) >> 31`` (no overflow for ``bound < 2**32``)."""
    return ((draws.long() >> ACCEPT_UNIFORM_SHIFT) * bound) >> ACCEPT_UNIFORM_SHIFT


def parents_from_links(next_token: torch.Tensor, next_sibling: torch.Tensor) -> torch.Tensor:
    """Recover each node's parent ``[B, N]`` (the root's is 0) from the retrieve links.

    The parent of a first child is the node that links to it; any other node shares the
    parent of its first sibling, found by pointer doubling along previous-sibling links.
    """
    batch_size, num_nodes = next_token.shape
    device = next_token.device
    node = torch.arange(num_nodes, device=device).expand(batch_size, -1)
    # Column num_nodes swallows the scatters of NO_NODE links.
    owner = torch.zeros(batch_size, num_nodes + 1, dtype=torch.long, device=device)
    owner.scatter_(1, torch.where(next_token < 0, num_nodes, next_token.long()), node)
    head = torch.arange(num_nodes + 1, device=device).repeat(batch_size, 1)
    head.scatter_(1, torch.where(next_sibling < 0, num_nodes, next_sibling.long()), node)
    head = head[:, :num_nodes]  # previous sibling, or the node itself for a first child
    reach = 1
    while reach < num_nodes:
        head = head.gather(1, head)
        reach *= 2
    return owner.gather(1, head)


def _check_tree_inputs(tokens: torch.Tensor, next_token: torch.Tensor, next_sibling: torch.Tensor,
                       num_steps: int) -> None:
    check_dims("tokens", tokens, 2)
    check_same_shape(tokens=tokens, retrieve_next_token=next_token,
                     retrieve_next_sibling=next_sibling)
    if num_steps < 0:
        raise TreeConfigError(f"num_steps must be >= 0, got {num_steps}")


def _check_noise(noise: SamplingNoise, batch_size: int, num_nodes: int) -> None:
    if tuple(noise.accept_draws.shape) != (batch_size, num_nodes) or tuple(
        noise.bonus_draws.shape
    ) != (batch_size,):
        raise TreeConfigError(
            f"noise must be accept_draws [B, N] = [{batch_size}, {num_nodes}] and bonus_draws "
            f"[B] = [{batch_size}]; got {tuple(noise.accept_draws.shape)} and "
            f"{tuple(noise.bonus_draws.shape)}"
        )


def _walk_result(batch_size: int, width: int, device: torch.device) -> torch.Tensor:
    accepted = torch.full((batch_size, width), NO_NODE, dtype=torch.long, device=device)
    accepted[:, 0] = 0
    return accepted


def verify_greedy(
    tokens: torch.Tensor,
    next_token: torch.Tensor,
    next_sibling: torch.Tensor,
    target_predict: torch.Tensor,
    num_steps: int,
) -> AcceptResult:
    _check_tree_inputs(tokens, next_token, next_sibling, num_steps)
    check_same_shape(tokens=tokens, target_predict=target_predict)
    batch_size, num_nodes = tokens.shape
    device = tokens.device
    node = torch.arange(num_nodes, device=device)
    parents = parents_from_links(next_token, next_sibling)  # [B, N]
    predict = target_predict.long()
    # Node j matches when its token is the target's choice at its parent.
    match = (tokens.long() == predict.gather(1, parents)) & (node >= 1)

    accepted = _walk_result(batch_size, num_steps + 1, device)
    current = torch.zeros(batch_size, dtype=torch.long, device=device)
    alive = torch.ones(batch_size, dtype=torch.bool, device=device)
    for depth in range(1, num_steps + 1):
        candidates = match & (parents == current.unsqueeze(1)) & alive.unsqueeze(1)
        first = torch.where(candidates, node, num_nodes).min(dim=1).values  # [B]
        alive = first < num_nodes
        current = torch.where(alive, first, current)
        accepted[:, depth] = torch.where(alive, first, NO_NODE)
    accept_lens = (accepted >= 0).sum(dim=1)
    return AcceptResult(accepted, accept_lens, predict.gather(1, current.unsqueeze(1)).squeeze(1))


def verify_tree_sampling(
    tokens: torch.Tensor,
    next_token: torch.Tensor,
    next_sibling: torch.Tensor,
    target_probs: torch.Tensor,
    noise: SamplingNoise,
    num_steps: int,
) -> AcceptResult:
    _check_tree_inputs(tokens, next_token, next_sibling, num_steps)
    check_dims("target_probs", target_probs, 3)
    batch_size, num_nodes = tokens.shape
    vocab = target_probs.shape[2]
    if tuple(target_probs.shape[:2]) != (batch_size, num_nodes):
        raise TreeConfigError(f"target_probs must be [B, N, V]; got {tuple(target_probs.shape)}")
    _check_noise(noise, batch_size, num_nodes)
    device = tokens.device
    node = torch.arange(num_nodes, device=device)
    parents = parents_from_links(next_token, next_sibling)
    tokens = tokens.long()
    # Two siblings with one token: the later one's residual mass is already 0.
    duplicate = (
        (tokens.unsqueeze(2) == tokens.unsqueeze(1))
        & (parents.unsqueeze(2) == parents.unsqueeze(1))
        & (node.view(1, 1, -1) < node.view(1, -1, 1))
        & (node >= 1).view(1, 1, -1)
    ).any(dim=2)  # [B, N]: an earlier sibling carries the same token
    draws = noise.accept_draws.long()
    batch = torch.arange(batch_size, device=device)

    accepted = _walk_result(batch_size, num_steps + 1, device)
    current = torch.zeros(batch_size, dtype=torch.long, device=device)
    alive = torch.ones(batch_size, dtype=torch.bool, device=device)
    for depth in range(1, num_steps + 1):
        probs = target_probs[batch, current].float()  # [B, V]
        quantized = quantize_probs(probs)
        total = quantized.sum(dim=1, keepdim=True)  # [B, 1] exact integer mass
        children = (parents == current.unsqueeze(1)) & (node >= 1) & alive.unsqueeze(1)
        mass = quantized.gather(1, tokens.clamp(0, vocab - 1))
        mass = torch.where(children & ~duplicate, mass, 0)  # [B, N] r(c)
        rejected_before = torch.cumsum(mass, dim=1) - mass  # mass of earlier siblings
        remaining = (total - rejected_before).clamp(min=1)
        # Child c is tried only if all earlier siblings were rejected; given that, it is
        # accepted with probability r(c) / (total - rejected): a uniform integer below the
        # remaining mass falls under r(c).
        accept = children & (mass > 0) & (scale_draws(draws, remaining) < mass)
        first = torch.where(accept, node, num_nodes).min(dim=1).values
        alive = first < num_nodes
        current = torch.where(alive, first, current)
        accepted[:, depth] = torch.where(alive, first, NO_NODE)

    # Bonus: the residual at the last node. If the walk ended by rejection, every child of
    # that node was rejected, so all their tokens leave the residual.
    residual = torch.cat(
        [quantize_probs(target_probs[batch, current]),
         torch.zeros(batch_size, 1, dtype=torch.long, device=device)], 1
    )  # [B, V + 1]; column V swallows non-children
    rejected = (parents == current.unsqueeze(1)) & (node >= 1) & ~alive.unsqueeze(1)
    residual.scatter_(1, torch.where(rejected, tokens.clamp(0, vocab - 1), vocab), 0)
    bonus = sample_masses(residual[:, :vocab], noise.bonus_draws)
    return AcceptResult(accepted, (accepted >= 0).sum(dim=1), bonus)


def verify_chain_sampling(
    tokens: torch.Tensor,
    draft_probs: torch.Tensor,
    target_probs: torch.Tensor,
    noise: SamplingNoise,
) -> AcceptResult:
    check_dims("tokens", tokens, 2)
    check_dims("target_probs", target_probs, 3)
    batch_size, num_nodes = tokens.shape
    vocab = target_probs.shape[2]
    if tuple(target_probs.shape) != (batch_size, num_nodes, vocab) or tuple(
        draft_probs.shape
    ) != (batch_size, num_nodes - 1, vocab):
        raise TreeConfigError(
            f"need target_probs [B, N, V] and draft_probs [B, N-1, V] for tokens "
            f"[{batch_size}, {num_nodes}]; got {tuple(target_probs.shape)} and "
            f"{tuple(draft_probs.shape)}"
        )
    _check_noise(noise, batch_size, num_nodes)
    device = tokens.device
    drafts = tokens[:, 1:].long().unsqueeze(2)  # [B, N-1, 1]
    target_mass = quantize_probs(target_probs[:, :-1].gather(2, drafts).squeeze(2))
    draft_mass = quantize_probs(draft_probs.gather(2, drafts).squeeze(2))  # [B, N-1]
    # Accept with probability min(1, p / q): a uniform integer below q falls under p.
    accept = scale_draws(noise.accept_draws[:, 1:], draft_mass.clamp(min=1)) < target_mass
    num_accepted = torch.cumprod(accept.long(), dim=1).sum(dim=1)  # [B] leading accepts

    node = torch.arange(num_nodes, device=device)
    accepted = torch.where(node <= num_accepted.unsqueeze(1), node, NO_NODE)
    batch = torch.arange(batch_size, device=device)
    probs = target_probs[batch, num_accepted].float()  # [B, V] target at the last node
    masses = quantize_probs(probs)
    if num_nodes > 1:
        rejected = num_accepted < num_nodes - 1
        draft_row = draft_probs[batch, num_accepted.clamp(max=num_nodes - 2)].float()
        residual = quantize_probs((probs - draft_row).clamp(min=0))
        # A residual without mass can only come from rounding; fall back to the target.
        use_residual = rejected & (residual.sum(dim=1) > 0)
        masses = torch.where(use_residual.unsqueeze(1), residual, masses)
    bonus = sample_masses(masses, noise.bonus_draws)
    return AcceptResult(accepted, num_accepted + 1, bonus)


def sample_masses(masses: torch.Tensor, draws: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw from integer ``masses [B, V]``: the first token whose running mass
    exceeds ``scale_draws(draw, total)``. Exact; a row without mass (invalid input) gives
    token 0."""
    total = masses.sum(dim=1)
    target = scale_draws(draws, total.clamp(min=1))
    index = (torch.cumsum(masses, dim=1) <= target.unsqueeze(1)).sum(dim=1)
    return torch.where(total > 0, index, 0)
