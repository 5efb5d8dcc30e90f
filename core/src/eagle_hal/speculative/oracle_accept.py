"""Oracle acceptance, for benchmarks only: every verify accepts exactly tau - 1 drafts.

What an iteration costs depends on the shapes it runs, not on what the weights say, while
how many tokens it emits depends on how often the target agrees with the draft. A model
with random weights (``eagle_hal.model.random_targets``) has the real shapes but a draft
the target almost never agrees with, so its accept lengths say nothing. The oracle fixes
the accept length instead: the draft and the verify do their full work (the accept op
itself runs too, its decision thrown away), then every request accepts the first ``tau - 1``
drafts along one designated path of the verified tree, the path to its deepest node (a
chain's whole chain), plus the target's bonus token at the path's end. Siblings stay what
the draft made them and the tree keeps its shape, so every kernel runs on what it would run
on at that accept length.

This measures the engine's cost at a given accept length; it is never a speedup users
get, and the emitted text is not the target's. It is enabled only by handing an
``OracleAccept`` to ``EagleWorker.accept_by_oracle`` (``eagle-hal bench`` does, for modes
that name a ``T``); nothing in the engine builds one. Where the designated path is shorter
than ``tau - 1`` (a tree whose best-first layout kept no node that deep) the request
accepts the whole path: the measured accept length then falls short of ``tau`` and says
so.
"""

from __future__ import annotations

from typing import Any

import torch

from eagle_hal.hal.sampling import NO_NODE, AcceptResult, SamplingNoise, SamplingOps
from eagle_hal.ops.reference_verify import parents_from_links

__all__ = ["OracleAccept", "forced_path"]


class OracleAccept:
    """Accept exactly ``tau - 1`` drafts plus the bonus token in every verify (see the
    module docstring). ``tau`` is the accept length: 1 accepts no draft."""

    def __init__(self, tau: int) -> None:
        if isinstance(tau, bool) or not isinstance(tau, int) or tau < 1:
            raise ValueError(f"an oracle accept length tau must be an integer >= 1, got {tau!r}")
        self.tau = tau

    def __repr__(self) -> str:
        return f"OracleAccept(tau={self.tau})"

    def label(self) -> str:
        """How results measured under it are labelled."""
        return f"oracle \N{GREEK SMALL LETTER TAU}={self.tau} (engine cost, not a speedup)"

    def wrap(self, ops: SamplingOps) -> SamplingOps:
        """``ops`` with the verify ops forced (every other op is ``ops``' own)."""
        return _OracleOps(ops, self.tau)  # type: ignore[return-value]


def forced_path(next_token: torch.Tensor, next_sibling: torch.Tensor, drafts: int,
                num_steps: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The designated path of each tree (its ``[B, N]`` retrieve links): from the root
    towards its deepest node (the lowest-numbered among equals), its first ``drafts``
    nodes, no deeper than ``num_steps``. Returns ``(accepted_nodes [B, num_steps + 1]``
    root first, ``NO_NODE`` padded; ``accept_lens [B]`` the nodes on it, root included;
    ``last [B]`` its last node). Device ops only, no read-back: capturable in a graph."""
    batch, nodes = next_token.shape
    device = next_token.device
    parents = parents_from_links(next_token, next_sibling)  # [B, N], the root's 0
    node = torch.arange(nodes, device=device).expand(batch, -1)
    depth = torch.zeros(batch, nodes, dtype=torch.int64, device=device)
    for _ in range(num_steps):  # a node at depth d is reached after d rounds
        depth = torch.where(node > 0, depth.gather(1, parents) + 1, 0)
    current = (depth * (nodes + 1) - node).argmax(dim=1, keepdim=True)  # [B, 1] deepest
    take = min(drafts, num_steps)
    # column num_steps + 1 swallows the path's nodes deeper than ``take``
    path = torch.full((batch, num_steps + 2), NO_NODE, dtype=torch.int64, device=device)
    path[:, 0] = 0
    for _ in range(num_steps):  # up from the deepest node, one parent a round
        level = depth.gather(1, current)
        path.scatter_(1, torch.where((level > 0) & (level <= take), level, num_steps + 1),
                      current)
        current = parents.gather(1, current)
    accepted = path[:, : num_steps + 1].contiguous()
    lens = (accepted >= 0).sum(dim=1)
    return accepted, lens, accepted.gather(1, (lens - 1)[:, None])[:, 0]


class _OracleOps:
    """A ``SamplingOps`` whose verify ops run, then take the oracle's decision."""

    def __init__(self, ops: SamplingOps, tau: int) -> None:
        self._ops = ops
        self.tau = tau

    def __getattr__(self, name: str) -> Any:
        return getattr(self._ops, name)

    def verify_greedy(self, tokens: torch.Tensor, next_token: torch.Tensor,
                      next_sibling: torch.Tensor, target_predict: torch.Tensor,
                      num_steps: int) -> AcceptResult:
        real = self._ops.verify_greedy(tokens, next_token, next_sibling, target_predict,
                                       num_steps)
        if num_steps == 0 or tokens.shape[1] == 1:
            return real
        accepted, lens, last = forced_path(next_token, next_sibling, self.tau - 1, num_steps)
        bonus = target_predict.long().gather(1, last[:, None])[:, 0]
        return AcceptResult(accepted, lens, bonus)

    def verify_tree_sampling(self, tokens: torch.Tensor, next_token: torch.Tensor,
                             next_sibling: torch.Tensor, target_probs: torch.Tensor,
                             noise: SamplingNoise, num_steps: int) -> AcceptResult:
        real = self._ops.verify_tree_sampling(tokens, next_token, next_sibling, target_probs,
                                              noise, num_steps)
        if num_steps == 0 or tokens.shape[1] == 1:
            return real
        accepted, lens, last = forced_path(next_token, next_sibling, self.tau - 1, num_steps)
        rows = torch.arange(tokens.shape[0], device=tokens.device)
        # the most probable token at the path's end (the oracle draws nothing)
        bonus = target_probs[rows, last].argmax(dim=-1)
        return AcceptResult(accepted, lens, bonus)
