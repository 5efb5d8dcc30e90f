"""Choosing tokens from target logits: greedy or lossless tree speculative sampling.

One function serves prefill (a one-node "tree" per request: just sample the next token),
plain decoding (the same) and verification of a draft tree. Requests at temperature 0
take the greedy path when the whole batch is greedy; in a mixed batch they go through
tree sampling with a one-hot target distribution, which takes exactly the greedy decisions.

Randomness is per request: a request's seed and a counter that never repeats for it (the
caller passes ``2 * cached_len`` for decode and ``2 * prompt_len + 1`` for prefill), so a
request samples the same tokens whatever else is in its batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import SamplingParams
from eagle_hal.hal.sampling import AcceptResult, SamplingOps

__all__ = ["SamplingBatch", "accept_tree"]


@dataclasses.dataclass(frozen=True, slots=True)
class SamplingBatch:
    """Per-request sampling settings as device tensors."""

    greedy: bool  # every request is greedy
    temperatures: torch.Tensor  # [B] float32
    top_ks: torch.Tensor  # [B] int64
    top_ps: torch.Tensor  # [B] float32
    seeds: torch.Tensor  # [B] int64

    @classmethod
    def of(
        cls, params: Sequence[SamplingParams], seeds: Sequence[int], device: torch.device
    ) -> SamplingBatch:
        return cls(
            greedy=all(p.greedy for p in params),
            temperatures=torch.tensor([p.temperature for p in params], dtype=torch.float32,
                                      device=device),
            top_ks=torch.tensor([p.top_k for p in params], dtype=torch.int64, device=device),
            top_ps=torch.tensor([p.top_p for p in params], dtype=torch.float32, device=device),
            seeds=torch.tensor(seeds, dtype=torch.int64, device=device),
        )


def accept_tree(
    ops: SamplingOps,
    logits: torch.Tensor,
    vocab_size: int,
    tokens: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    num_steps: int,
    sampling: SamplingBatch,
    counters: torch.Tensor,
) -> AcceptResult:
    """Accept a path of a verify tree from the target's ``logits [B, N, V]``.

    ``tokens``/``retrieve_*`` are the tree's ``[B, N]`` layout (a one-node tree for prefill
    and plain decoding). Greedy when every request is greedy, else tree speculative
    sampling with deterministic drafts (lossless).
    """
    if sampling.greedy:
        predict = ops.masked_argmax(logits, vocab_size)  # [B, N]
        if tokens.shape[1] == 1:  # the root alone: accept it, the bonus is the argmax
            batch = tokens.shape[0]
            accepted = torch.zeros(batch, 1, dtype=torch.int64, device=tokens.device)
            return AcceptResult(accepted, accepted[:, 0] + 1, predict[:, 0])
        return ops.verify_greedy(tokens, retrieve_next_token, retrieve_next_sibling, predict,
                                 num_steps)
    batch, nodes = tokens.shape
    probs = ops.target_probs(
        logits, vocab_size, sampling.temperatures, sampling.top_ks, sampling.top_ps
    )  # [B, N, V]
    noise = ops.sampling_noise(
        batch, nodes, device=logits.device, seeds=sampling.seeds, counter=counters
    )
    return ops.verify_tree_sampling(
        tokens, retrieve_next_token, retrieve_next_sibling, probs, noise, num_steps
    )
