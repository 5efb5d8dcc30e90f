"""``TritonSamplingOps``: the reference ops with the hot ones replaced by Triton kernels.

Shared by the CUDA, ROCm and XPU backends. Each override validates exactly as the
reference does, prepares contiguous int64 inputs, and launches one kernel (two for the
split-vocabulary argmax); outputs equal the reference bit for bit. Under
``TRITON_INTERPRET=1`` the kernels run on CPU tensors.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import triton

from eagle_hal.hal.sampling import (
    AcceptResult,
    DraftTree,
    SamplingNoise,
    TreeConfigError,
    TreeStep,
    VerifyTree,
)
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.reference import ReferenceSamplingOps
from eagle_hal.ops.reference_bookkeeping import _check_accept
from eagle_hal.ops.reference_checks import (
    check_dims,
    check_mask_mode,
    check_rows,
    check_same_shape,
    check_vocab,
    next_power_of_2,
)
from eagle_hal.ops.reference_tree import check_grown_step, check_num_drafts, first_candidate_id
from eagle_hal.ops.reference_verify import _check_noise, _check_tree_inputs
from eagle_hal.ops.triton import bookkeeping_kernels as _bookkeeping
from eagle_hal.ops.triton import noise_kernels as _noise
from eagle_hal.ops.triton import tree_kernels as _tree
from eagle_hal.ops.triton import verify_kernels as _verify

__all__ = ["TritonSamplingOps"]

_MIN_BLOCK = 16  # smallest block any kernel uses (tiny trees are padded and masked)
# organize_draft_tree's kernel ranks a request's candidates pairwise in one [BLOCK, BLOCK]
# block; past this many (K = 8 from S = 6 on) the reference's sorts take over
ORGANIZE_MAX_CANDIDATES = 256
_MASK_MODE_IDS = {
    TreeMaskMode.TREE_BLOCK: _tree.MASK_TREE_BLOCK,
    TreeMaskMode.BIT_PACKED: _tree.MASK_BIT_PACKED,
    TreeMaskMode.FULL: _tree.MASK_FULL,
}


def _block(n: int, cap: int | None = None) -> int:
    block = max(_MIN_BLOCK, next_power_of_2(n))
    return block if cap is None else min(block, cap)


def _long(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.long().contiguous()


class TritonSamplingOps(ReferenceSamplingOps):
    """Fused tree building, verification, bonus fill, slot assignment, masked argmax and
    seeded noise."""

    fused_ops: tuple[str, ...] = (
        "grow_tree_step",  # past depth 1 (the root's step is the reference's: no selection)
        "organize_draft_tree",  # up to ORGANIZE_MAX_CANDIDATES candidates (K + (S-1)K^2)
        "build_verify_tree",
        "masked_argmax",
        "verify_greedy",
        "verify_tree_sampling",
        "fill_bonus_tokens",
        "assign_verify_slots",
        "draft_kv_slots",
        "sampling_noise",  # the seeded path; the generator path is torch's own RNG
    )

    def __init__(self, num_warps: int = 8, vocab_block: int = 4096, vocab_chunk: int = 16384):
        for name, value in (("num_warps", num_warps), ("vocab_block", vocab_block),
                            ("vocab_chunk", vocab_chunk)):
            if value < 1 or value & (value - 1):
                raise ValueError(f"{name} must be a positive power of two, got {value}")
        if vocab_chunk < vocab_block:
            raise ValueError(f"vocab_chunk ({vocab_chunk}) must be >= vocab_block ({vocab_block})")
        self.num_warps = num_warps
        self.vocab_block = vocab_block
        self.vocab_chunk = vocab_chunk

    def grow_tree_step(
        self, topk_probs: torch.Tensor, topk_ids: torch.Tensor, previous: TreeStep | None
    ) -> TreeStep:
        if previous is None:
            return super().grow_tree_step(topk_probs, topk_ids, None)
        batch_size, topk = check_grown_step(topk_probs, topk_ids, previous)
        device, depth, count = topk_probs.device, previous.depth + 1, topk * topk

        def empty(columns: int, dtype: torch.dtype) -> torch.Tensor:
            return torch.empty(batch_size, columns, dtype=dtype, device=device)

        step = TreeStep(
            depth, empty(topk, torch.float32), empty(topk, torch.long), empty(topk, torch.long),
            empty(topk, torch.long), empty(count, torch.float32), empty(count, torch.long),
            empty(count, torch.long),
        )
        if batch_size:
            _tree.grow_tree_kernel[(batch_size,)](
                previous.scores.float().contiguous(), _long(previous.node_ids),
                topk_probs.contiguous(), _long(topk_ids), step.candidate_scores,
                step.candidate_tokens, step.candidate_parents, step.scores, step.tokens,
                step.parent_branches, step.node_ids, first_candidate_id(depth, topk),
                TOPK=topk, BLOCK=_block(count), num_warps=1 if count <= 256 else 4,
            )
        return step

    def organize_draft_tree(self, steps: Sequence[TreeStep], num_draft_tokens: int) -> DraftTree:
        if not steps:
            raise TreeConfigError("organize_draft_tree needs at least one grown step")
        num_candidates = sum(s.candidate_scores.shape[1] for s in steps)
        block = _block(num_candidates)
        if block > ORGANIZE_MAX_CANDIDATES:  # the [BLOCK, BLOCK] ranks would not fit
            return super().organize_draft_tree(steps, num_draft_tokens)
        num_drafts = check_num_drafts(steps, num_candidates, num_draft_tokens)
        scores = torch.cat([s.candidate_scores.float() for s in steps], dim=1)  # [B, M]
        batch_size = scores.shape[0]
        tokens = torch.cat([_long(s.candidate_tokens) for s in steps], dim=1)
        parents = torch.cat([_long(s.candidate_parents) for s in steps], dim=1)
        out = [torch.empty(batch_size, num_drafts, dtype=torch.long, device=scores.device)
               for _ in range(3)]
        if batch_size and num_drafts:
            _tree.organize_tree_kernel[(batch_size,)](
                scores, tokens, parents, *out, num_candidates, num_drafts, BLOCK=block,
                num_warps=4 if block <= 128 else 8,
            )
        return DraftTree(*out)

    def build_verify_tree(
        self,
        root_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        draft_parents: torch.Tensor,
        seq_lens: torch.Tensor,
        mask_mode: str,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        check_dims("draft_tokens", draft_tokens, 2)
        check_same_shape(draft_tokens=draft_tokens, draft_parents=draft_parents)
        batch_size, num_nodes = draft_tokens.shape[0], draft_tokens.shape[1] + 1
        check_rows("root_tokens", root_tokens, batch_size)
        check_rows("seq_lens", seq_lens, batch_size)
        check_mask_mode(mask_mode, num_nodes, seq_lens_sum)
        device = draft_tokens.device
        seq_lens = _long(seq_lens)

        def node_tensor() -> torch.Tensor:
            return torch.empty(batch_size, num_nodes, dtype=torch.long, device=device)

        tokens, positions, retrieve_index = node_tensor(), node_tensor(), node_tensor()
        next_token, next_sibling = node_tensor(), node_tensor()
        block_start = seq_lens  # unused outside FULL
        if mask_mode == TreeMaskMode.TREE_BLOCK:
            tree_mask = torch.empty(batch_size, num_nodes, num_nodes, dtype=torch.bool,
                                    device=device)
        elif mask_mode == TreeMaskMode.BIT_PACKED:
            tree_mask = node_tensor()
        else:
            assert seq_lens_sum is not None
            total = num_nodes * (seq_lens_sum + batch_size * num_nodes)
            tree_mask = torch.empty(total, dtype=torch.bool, device=device)
            block_size = num_nodes * (seq_lens + num_nodes)
            block_start = torch.cumsum(block_size, dim=0) - block_size
        if batch_size:
            kernel_mask = tree_mask.view(torch.int8) if tree_mask.dtype == torch.bool else tree_mask
            _tree.build_tree_kernel[(batch_size, num_nodes)](
                _long(root_tokens), _long(draft_tokens), _long(draft_parents), seq_lens,
                tokens, positions, retrieve_index, next_token, next_sibling,
                kernel_mask, block_start, num_nodes,
                MASK_MODE=_MASK_MODE_IDS[mask_mode], BLOCK_NODES=_block(num_nodes),
                BLOCK_PREFIX=self.vocab_block, num_warps=self.num_warps,
            )
        return VerifyTree(
            tokens, positions, retrieve_index, next_token, next_sibling, tree_mask, mask_mode
        )

    def masked_argmax(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        check_vocab(logits, vocab_size)
        lead_shape = logits.shape[:-1]
        rows = logits.reshape(-1, logits.shape[-1])
        if rows.stride(-1) != 1:
            rows = rows.contiguous()
        num_rows = rows.shape[0]
        block = _block(vocab_size, self.vocab_block)
        chunk = max(block, _block(vocab_size, self.vocab_chunk))
        num_parts = triton.cdiv(vocab_size, chunk)
        out = torch.empty(num_rows, dtype=torch.long, device=logits.device)
        if num_rows:
            part_values = torch.empty(num_rows, num_parts, dtype=torch.float32,
                                      device=logits.device)
            part_indices = torch.empty(num_rows, num_parts, dtype=torch.long, device=logits.device)
            _bookkeeping.argmax_partial_kernel[(num_rows, num_parts)](
                rows, rows.stride(0), vocab_size, part_values, part_indices, num_parts,
                CHUNK=chunk, BLOCK=block, num_warps=self.num_warps,
            )
            _bookkeeping.argmax_reduce_kernel[(num_rows,)](
                part_values, part_indices, out, num_parts, BLOCK_PARTS=_block(num_parts),
                num_warps=self.num_warps,
            )
        return out.reshape(lead_shape)

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
        if seeds is None:
            return super().sampling_noise(batch_size, num_nodes, device=device,
                                          generator=generator)
        if tuple(seeds.shape) != (batch_size,):
            raise TreeConfigError(f"seeds must be [B] = [{batch_size}], got {tuple(seeds.shape)}")
        seeds = _long(seeds.to(device))
        if isinstance(counter, torch.Tensor):
            counters = _long(counter.to(device).expand(batch_size))
        else:
            counters = torch.full((batch_size,), counter, dtype=torch.long, device=device)
        draws = torch.empty(batch_size, num_nodes + 1, dtype=torch.long, device=device)
        if batch_size:
            _noise.seeded_noise_kernel[(batch_size,)](
                seeds, counters, draws, num_nodes + 1, BLOCK=_block(num_nodes + 1, 1024),
                num_warps=self.num_warps,
            )
        return SamplingNoise(draws[:, :num_nodes], draws[:, num_nodes])

    def verify_greedy(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_predict: torch.Tensor,
        num_steps: int,
    ) -> AcceptResult:
        _check_tree_inputs(tokens, retrieve_next_token, retrieve_next_sibling, num_steps)
        check_same_shape(tokens=tokens, target_predict=target_predict)
        batch_size, num_nodes = tokens.shape
        accepted, accept_lens, bonus = self._accept_outputs(batch_size, num_steps, tokens.device)
        if batch_size:
            _verify.verify_greedy_kernel[(batch_size,)](
                _long(tokens), _long(retrieve_next_token), _long(retrieve_next_sibling),
                _long(target_predict), accepted, accept_lens, bonus, num_nodes, num_steps + 1,
                num_warps=self.num_warps,
            )
        return AcceptResult(accepted, accept_lens, bonus)

    def verify_tree_sampling(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_probs: torch.Tensor,
        noise: SamplingNoise,
        num_steps: int,
    ) -> AcceptResult:
        _check_tree_inputs(tokens, retrieve_next_token, retrieve_next_sibling, num_steps)
        check_dims("target_probs", target_probs, 3)
        batch_size, num_nodes = tokens.shape
        vocab = target_probs.shape[2]
        if tuple(target_probs.shape[:2]) != (batch_size, num_nodes):
            raise TreeConfigError(
                f"target_probs must be [B, N, V]; got {tuple(target_probs.shape)}"
            )
        _check_noise(noise, batch_size, num_nodes)
        probs = target_probs if target_probs.stride(2) == 1 else target_probs.contiguous()
        accepted, accept_lens, bonus = self._accept_outputs(batch_size, num_steps, tokens.device)
        if batch_size:
            _verify.tree_sampling_kernel[(batch_size,)](
                _long(tokens), _long(retrieve_next_token), _long(retrieve_next_sibling),
                probs, _long(noise.accept_draws), _long(noise.bonus_draws), accepted,
                accept_lens, bonus, num_nodes, vocab, num_steps + 1, probs.stride(0),
                probs.stride(1), BLOCK_VOCAB=_block(vocab, self.vocab_block),
                num_warps=self.num_warps,
            )
        return AcceptResult(accepted, accept_lens, bonus)

    def fill_bonus_tokens(
        self,
        tokens: torch.Tensor,
        accepted_nodes: torch.Tensor,
        accept_lens: torch.Tensor,
        bonus_tokens: torch.Tensor,
    ) -> torch.Tensor:
        _check_accept(tokens, accepted_nodes, accept_lens)
        check_rows("bonus_tokens", bonus_tokens, tokens.shape[0])
        batch_size, num_nodes = tokens.shape
        width = accepted_nodes.shape[1]
        out = torch.empty(batch_size, width, dtype=torch.long, device=tokens.device)
        if batch_size:
            _bookkeeping.fill_bonus_kernel[(batch_size,)](
                _long(tokens), _long(accepted_nodes), _long(accept_lens), _long(bonus_tokens),
                out, num_nodes, width, BLOCK_WIDTH=_block(width), num_warps=self.num_warps,
            )
        return out

    def assign_verify_slots(
        self,
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
                f"out_cache_loc must be [B * N] for B = {batch_size}, "
                f"got {tuple(out_cache_loc.shape)}"
            )
        if req_to_token.stride(1) != 1:
            raise TreeConfigError("req_to_token's rows must be contiguous")
        num_nodes = out_cache_loc.shape[0] // batch_size
        _bookkeeping.assign_verify_slots_kernel[(batch_size,)](
            req_to_token, req_to_token.stride(0), table_rows.contiguous(),
            seq_lens.contiguous(), out_cache_loc.contiguous(), num_nodes,
            BLOCK=_block(num_nodes, self.vocab_block), num_warps=self.num_warps,
        )

    def draft_kv_slots(
        self, scratch_slots: torch.Tensor, parent_branches: Sequence[torch.Tensor], step: int
    ) -> torch.Tensor:
        check_dims("scratch_slots", scratch_slots, 3)
        batch_size, num_steps, topk = scratch_slots.shape
        if not 0 <= step < num_steps or len(parent_branches) <= step:
            raise TreeConfigError(
                f"step {step} needs 0 <= step < S = {num_steps} and parent_branches for depths "
                f"1..{step + 1}; got {len(parent_branches)}"
            )
        out = torch.empty(batch_size * topk, step + 1, dtype=scratch_slots.dtype,
                          device=scratch_slots.device)
        if batch_size:
            parents = torch.stack([_long(p) for p in parent_branches[: step + 1]])  # [step+1, B, K]
            _bookkeeping.draft_kv_slots_kernel[(batch_size * topk,)](
                scratch_slots.contiguous(), parents, out, batch_size, topk, num_steps, step,
                num_warps=self.num_warps,
            )
        return out

    @staticmethod
    def _accept_outputs(
        batch_size: int, num_steps: int, device: torch.device
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        accepted = torch.empty(batch_size, num_steps + 1, dtype=torch.long, device=device)
        accept_lens = torch.empty(batch_size, dtype=torch.long, device=device)
        bonus = torch.empty(batch_size, dtype=torch.long, device=device)
        return accepted, accept_lens, bonus

