"""The pure-torch reference ``SamplingOps``: runs on any device, the default of every backend.

The arithmetic lives in ``reference_tree`` (growth, selection, verify layout),
``reference_target`` (argmax, sampling distributions, noise), ``reference_verify``
(acceptance) and ``reference_bookkeeping`` (bonus fill, compaction, slots); this class
binds them to the contract. Fused implementations subclass it and override what they fuse.

K = 1 (chain) needs no special path: ``grow_tree_step`` keeps the single child,
``organize_draft_tree`` selects every candidate in order (parents ``0, 1, ..., S-1``), and
the verify tree is a chain with ``N = S + 1``; ``verify_chain_sampling`` is the chain's
sampling rule with real draft probabilities.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from eagle_hal.hal.sampling import (
    AcceptedPath,
    AcceptResult,
    DraftTree,
    SamplingNoise,
    SamplingOps,
    TreeStep,
    VerifyTree,
)
from eagle_hal.ops import reference_bookkeeping as _bookkeeping
from eagle_hal.ops import reference_target as _target
from eagle_hal.ops import reference_tree as _tree
from eagle_hal.ops import reference_verify as _verify

__all__ = ["ReferenceSamplingOps"]


class ReferenceSamplingOps(SamplingOps):
    """Every ``SamplingOps`` method in plain torch, vectorised over the batch."""

    fused_ops: tuple[str, ...] = ()  # names of the methods a subclass replaced with kernels

    def grow_tree_step(
        self, topk_probs: torch.Tensor, topk_ids: torch.Tensor, previous: TreeStep | None
    ) -> TreeStep:
        return _tree.grow_tree_step(topk_probs, topk_ids, previous)

    def organize_draft_tree(self, steps: Sequence[TreeStep], num_draft_tokens: int) -> DraftTree:
        return _tree.organize_draft_tree(steps, num_draft_tokens)

    def build_verify_tree(
        self,
        root_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        draft_parents: torch.Tensor,
        seq_lens: torch.Tensor,
        mask_mode: str,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        return _tree.build_verify_tree(
            root_tokens, draft_tokens, draft_parents, seq_lens, mask_mode, seq_lens_sum
        )

    def masked_argmax(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        return _target.masked_argmax(logits, vocab_size)

    def target_probs(
        self,
        logits: torch.Tensor,
        vocab_size: int,
        temperatures: torch.Tensor,
        top_ks: torch.Tensor,
        top_ps: torch.Tensor,
        min_ps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return _target.target_probs(logits, vocab_size, temperatures, top_ks, top_ps, min_ps)

    def sampling_noise(
        self,
        batch_size: int,
        num_nodes: int,
        *,
        device: torch.device | str,
        generator: torch.Generator | None = None,
        seeds: torch.Tensor | None = None,
        counter: int | torch.Tensor = 0,
    ) -> SamplingNoise:
        return _target.sampling_noise(
            batch_size, num_nodes, device=device, generator=generator, seeds=seeds, counter=counter
        )

    def verify_greedy(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_predict: torch.Tensor,
        num_steps: int,
    ) -> AcceptResult:
        return _verify.verify_greedy(
            tokens, retrieve_next_token, retrieve_next_sibling, target_predict, num_steps
        )

    def verify_tree_sampling(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_probs: torch.Tensor,
        noise: SamplingNoise,
        num_steps: int,
    ) -> AcceptResult:
        return _verify.verify_tree_sampling(
            tokens, retrieve_next_token, retrieve_next_sibling, target_probs, noise, num_steps
        )

    def verify_chain_sampling(
        self,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor,
        target_probs: torch.Tensor,
        noise: SamplingNoise,
    ) -> AcceptResult:
        return _verify.verify_chain_sampling(tokens, draft_probs, target_probs, noise)

    def fill_bonus_tokens(
        self,
        tokens: torch.Tensor,
        accepted_nodes: torch.Tensor,
        accept_lens: torch.Tensor,
        bonus_tokens: torch.Tensor,
    ) -> torch.Tensor:
        return _bookkeeping.fill_bonus_tokens(tokens, accepted_nodes, accept_lens, bonus_tokens)

    def compact_accepted(
        self,
        tokens: torch.Tensor,
        accepted_nodes: torch.Tensor,
        accept_lens: torch.Tensor,
        verify_slots: torch.Tensor,
    ) -> AcceptedPath:
        return _bookkeeping.compact_accepted(tokens, accepted_nodes, accept_lens, verify_slots)

    def assign_verify_slots(
        self,
        req_to_token: torch.Tensor,
        table_rows: torch.Tensor,
        seq_lens: torch.Tensor,
        out_cache_loc: torch.Tensor,
    ) -> None:
        _bookkeeping.assign_verify_slots(req_to_token, table_rows, seq_lens, out_cache_loc)

    def draft_kv_slots(
        self, scratch_slots: torch.Tensor, parent_branches: Sequence[torch.Tensor], step: int
    ) -> torch.Tensor:
        return _bookkeeping.draft_kv_slots(scratch_slots, parent_branches, step)
