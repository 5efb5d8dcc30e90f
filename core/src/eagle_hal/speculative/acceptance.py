"""Choosing tokens from target logits: greedy or lossless tree speculative sampling.

One function serves prefill (a one-node "tree" per request: just sample the next token),
plain decoding (the same) and verification of a draft tree. Requests at temperature 0
take the greedy path when the whole batch is greedy; in a mixed batch they go through
tree sampling with a one-hot target distribution, which takes exactly the greedy decisions.

Randomness is per request: a request's seed and a counter that never repeats for it (the
caller passes ``2 * cached_len`` for decode and ``2 * prompt_len + 1`` for prefill), so a
request samples the same tokens whatever else is in its batch.

After the accept, an overlapped iteration goes on on the device: ``accept_and_extend``
moves the accepted path to the front of the verify block and runs the draft's extend over
it, eagerly (``speculative.speculative_overlap``) or inside the verify-accept-extend graph
(``engine.graphs.iteration``), which records ``greedy_accept_and_extend``'s body: the
verify, the greedy accept and ``accept_and_extend``, the same code as the eager path.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import torch

from eagle_hal.engine.request import SamplingParams
from eagle_hal.hal.sampling import AcceptResult, SamplingOps

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.graphs.iteration import ExtendForward, VerifyExtend

__all__ = ["SamplingBatch", "accept_and_extend", "accept_tree", "greedy_accept_and_extend"]


@dataclasses.dataclass(frozen=True, slots=True)
class SamplingBatch:
    """Per-request sampling settings as device tensors."""

    greedy: bool  # every request is greedy
    temperatures: torch.Tensor  # [B] float32
    top_ks: torch.Tensor  # [B] int64
    top_ps: torch.Tensor  # [B] float32
    seeds: torch.Tensor  # [B] int64
    min_ps: torch.Tensor | None = None  # [B] float32; None: no request sets min-p

    def target_probs(self, ops: SamplingOps, logits: torch.Tensor, vocab_size: int,
                     temperatures: torch.Tensor | None = None) -> torch.Tensor:
        """``ops.target_probs`` with these settings (``temperatures`` in place of the
        batch's where given); ``min_ps`` goes only where a request sets it, so a batch
        without min-p costs nothing more."""
        temperatures = self.temperatures if temperatures is None else temperatures
        if self.min_ps is None:
            return ops.target_probs(logits, vocab_size, temperatures, self.top_ks, self.top_ps)
        return ops.target_probs(logits, vocab_size, temperatures, self.top_ks, self.top_ps,
                                min_ps=self.min_ps)

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
            min_ps=torch.tensor([p.min_p for p in params], dtype=torch.float32, device=device)
            if any(p.min_p > 0 for p in params) else None,
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
    probs = sampling.target_probs(ops, logits, vocab_size)  # [B, N, V]
    noise = ops.sampling_noise(
        batch, nodes, device=logits.device, seeds=sampling.seeds, counter=counters
    )
    return ops.verify_tree_sampling(
        tokens, retrieve_next_token, retrieve_next_sibling, probs, noise, num_steps
    )


def accept_and_extend(
    runner: Any,
    ops: SamplingOps,
    out: Any,
    result: AcceptResult,
    tokens: torch.Tensor,
    verify_slots: torch.Tensor,
    seq_lens: torch.Tensor,
    topk: int,
    width: int,
    extend: ExtendForward,
) -> tuple[torch.Tensor, ...]:
    """An overlapped iteration after its accept, on the device, eager or recorded alike:
    move the accepted path to the front of the verify block, run the draft extend over
    ``width`` tokens (the path's drafts then the bonus token, padded with the bonus) fed
    the accepted nodes' features, and take the draft's top-K at each request's last
    emitted token.

    ``out`` the verify forward's output, ``result`` its ``AcceptResult``, ``tokens`` /
    ``verify_slots`` ``[B, N]`` the verify tree's, ``seq_lens`` ``[B]`` int64 cached
    lengths, ``extend(input_ids [B, W], positions [B, W], features [B * W, H])`` the
    draft's extend forward, returning its hidden states ``[B * W, H]``. Returns
    ``(packed [B, 2 + W + N], seq_lens + accept lengths, bonus [B], probs [B, K],
    ids [B, K], hidden [B, H])``."""
    batch = tokens.shape[0]
    path = ops.compact_accepted(tokens, result.accepted_nodes, result.accept_lens, verify_slots)
    if topk > 1:  # a chain's accepted path is always in place
        runner.target_kv.move_kv(path.kv_source.reshape(-1), path.kv_destination.reshape(-1))
    lens, bonus = result.accept_lens.long(), result.bonus_tokens.long()  # [B] each
    column = torch.arange(width, dtype=torch.int64, device=tokens.device)
    shifted = torch.cat([path.tokens[:, 1:], bonus[:, None]], dim=1)  # [B, W]
    input_ids = torch.where(column < (lens - 1)[:, None], shifted, bonus[:, None])
    features = runner.draft.project_target_features(out)[path.hidden_index.reshape(-1)]
    hidden_out = extend(input_ids, seq_lens[:, None] + column, features.to(runner.dtype))
    rows = torch.arange(batch, dtype=torch.int64, device=tokens.device)
    last = hidden_out.view(batch, width, -1)[rows, lens - 1]  # [B, H] the last emitted
    probs, ids = runner.draft.topk(last, topk)
    packed = torch.cat(
        [lens.view(-1, 1), bonus.view(-1, 1), result.accepted_nodes.long(), tokens.long()], dim=1
    )
    return packed, seq_lens + lens, bonus, probs, ids, last


def greedy_accept_and_extend(
    runner: Any, ops: SamplingOps, vocab_size: int
) -> Callable[[VerifyExtend], tuple[torch.Tensor, ...]]:
    """The body the verify-accept-extend graph records (``engine.graphs.iteration``): the
    target's verify forward over the graph's static batch, its lm_head, the greedy accept
    (``SamplingOps.verify_greedy``, as ``accept_tree`` takes it for a greedy batch) and
    ``accept_and_extend``; returns ``accept_and_extend``'s outputs."""

    def body(it: VerifyExtend) -> tuple[torch.Tensor, ...]:
        out = it.verify()
        batch, nodes = it.tokens.shape
        logits = runner.target.compute_logits(out.hidden_states).view(batch, nodes, -1)
        predict = ops.masked_argmax(logits, vocab_size)  # [B, N]
        steps = it.shape.num_steps
        result = ops.verify_greedy(it.tokens, it.next_token, it.next_sibling, predict, steps)
        return accept_and_extend(runner, ops, out, result, it.tokens, it.verify_slots,
                                 it.seq_lens, it.shape.topk, steps + 1, it.extend)

    return body
