"""What a drafter gives an iteration: a proposed tree per request, checked by one verify.

Speculation needs a proposal, not a trained head: anything that guesses the next tokens
of a request can feed the same verify path, and the verify keeps the output lossless
whatever it guesses (greedy: the longest path the target agrees with; sampling: tree
speculative sampling with the drafted tokens as one-hot proposals,
``SamplingOps.verify_tree_sampling``). A ``Drafter``:

* ``propose``: for each request of a batch, given its tokens so far (the pending root
  last), a ``Proposal``: up to ``N - 1`` draft tokens in at most ``S`` levels, each with
  its parent as a verify-node index (0 = the root, node ``i + 1`` is entry ``i``), parents
  before their children, siblings distinct. An empty proposal drafts nothing for that
  request;
* ``observe``: the tokens a request emitted in an iteration;
* ``release``: forget a request (finished, cancelled);
* ``on_device``: whether it proposes from device tensors or on the host (the n-gram
  drafter).

A drafter that runs a model (the early-exit self-drafter, ``speculative.self_draft``; a
standalone draft model, ``speculative.draft_model``) reads and writes KV through the
runner, so it is ``on_device`` and has two more methods: ``bind(runner)``, called once by
the worker before any iteration, and ``propose_requests(requests, shape)``, which the
eager iteration calls instead of ``propose`` with the batch's ``Request``s (their table
rows and cached lengths), before it reserves the verify's slots.

The EAGLE head drafts through its own path (``speculative.drafting``, its state kept by
``DraftTracker``), which replays as device graphs and overlaps iterations; the eager
iteration takes that path when the worker has no ``Drafter``, and this one when it has
(``EagerIteration.decode``'s draft step). The worker runs every ``Drafter`` through the
eager iteration: the overlapped strategies grow the next tree from the head's state on
the device, which a drafter does not have.

``proposal_tree`` lays a batch's proposals out as the verify tree. Requests of one
verify share its width N (the widest proposal + 1); a narrower proposal is padded with
nodes no link reaches, so they are verified (their K/V lands in reserved slots that the
accept frees) but can never be accepted: a request that proposes nothing takes a one-node
step, plain decoding. A batch in which no request proposes anything runs a plain decoding
iteration, with no verify tree at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple, Protocol, runtime_checkable

import torch

from eagle_hal.hal.sampling import NO_NODE, SamplingOps, TreeShape, VerifyTree

__all__ = ["Drafter", "Proposal", "proposal_tree"]


class Proposal(NamedTuple):
    """One request's proposed tree: ``tokens[i]`` is verify node ``i + 1``, its parent
    ``parents[i]`` a verify-node index below ``i + 1`` (0 = the root)."""

    tokens: tuple[int, ...] = ()
    parents: tuple[int, ...] = ()

    @property
    def depth(self) -> int:
        """The deepest level (0: nothing proposed)."""
        depths = [0]
        for parent in self.parents:
            depths.append(depths[parent] + 1)
        return max(depths)


@runtime_checkable
class Drafter(Protocol):
    """A source of proposals for the verify path (see the module docstring)."""

    on_device: bool

    def propose(self, request_ids: Sequence[int], tokens: Sequence[Sequence[int]],
                shape: TreeShape) -> list[Proposal]:
        """Each request's proposal within ``shape`` (at most ``num_steps`` levels, at most
        ``topk`` children per node, at most ``num_draft_tokens - 1`` nodes), given its
        tokens so far (``tokens[b]``, the pending root last)."""
        ...

    def observe(self, request_id: int, emitted: Sequence[int]) -> None:
        """The tokens ``request_id`` emitted in the last iteration."""
        ...

    def release(self, request_id: int) -> None:
        """Forget ``request_id``."""
        ...


def proposal_tree(
    ops: SamplingOps,
    proposals: Sequence[Proposal],
    roots: torch.Tensor,
    seq_lens: torch.Tensor,
    mask_mode: str,
    seq_lens_sum: int,
) -> VerifyTree:
    """The verify tree of ``proposals`` (one per request, at least one non-empty) over
    ``roots`` ``[B]`` at positions ``seq_lens`` ``[B]``: ``ops.build_verify_tree`` over the
    proposals padded to the widest (padding: children of the root), then every link to a
    padding node cut, so that acceptance never reaches one."""
    width = max(len(p.tokens) for p in proposals)
    tokens = [list(p.tokens) + [0] * (width - len(p.tokens)) for p in proposals]
    parents = [list(p.parents) + [0] * (width - len(p.parents)) for p in proposals]
    device = roots.device
    tree = ops.build_verify_tree(
        roots, torch.tensor(tokens, dtype=torch.int64, device=device),
        torch.tensor(parents, dtype=torch.int64, device=device), seq_lens, mask_mode,
        seq_lens_sum=seq_lens_sum,
    )
    real = torch.tensor([len(p.tokens) + 1 for p in proposals], dtype=torch.int64,
                        device=device)  # [B] nodes that are not padding, root included
    padding = torch.arange(width + 1, device=device)[None, :] >= real[:, None]  # [B, N]

    def cut(links: torch.Tensor) -> torch.Tensor:
        target = padding.gather(1, links.clamp(min=0))
        return torch.where((links != NO_NODE) & target, NO_NODE, links)

    return tree._replace(retrieve_next_token=cut(tree.retrieve_next_token),
                         retrieve_next_sibling=cut(tree.retrieve_next_sibling))
