"""The tree and sampling operations contract: draft-tree growth, verify trees, acceptance.

Every backend must build the same trees and take the same accept decisions, so the
arithmetic is specified here once and implemented in pure torch by
``eagle_hal.ops.reference.ReferenceSamplingOps``; a backend may replace any method with a
fused kernel, and the conformance suite holds it to the reference (integer outputs
bit-exact). No method may read a device tensor back to the host: all of them must be
capturable in a device graph (``build_verify_tree`` in the ``FULL`` layout excepted, whose
output size depends on the sequence lengths).

Conventions (B requests, K top-k branches, S draft steps, N verify nodes per request):

* Scores are cumulative *products* of draft probabilities (as EAGLE-2), so a child never
  outscores its parent. Ties are broken towards the lower candidate index everywhere.
* Draft candidates of all steps are numbered by a flat *candidate id*: id 0 is the root
  (the last accepted token), ids ``1..K`` the step-0 candidates, then ``K*K`` ids per later
  step. A step's parents are candidate ids, so the root needs no sentinel.
* Verify nodes: node 0 is the root, nodes ``1..N-1`` the selected drafts in increasing
  candidate id, hence a parent always precedes its child and siblings are linked in
  increasing node index (the *sibling order* used by acceptance).
* Every random decision is exact integer arithmetic: a probability ``p`` enters as the
  *mass* ``floor(p * 2**ACCEPT_PROB_BITS)``; a draw (uniform in ``[0, ACCEPT_DRAW_LIMIT)``)
  is scaled into a range ``R`` as ``((draw >> 31) * R) >> 31``, uniform in ``[0, R)``; a
  coin of probability ``m / R`` comes up when that value is below ``m``, and a bonus token
  is drawn by inverse CDF, the first token whose running mass exceeds the scaled value for
  ``R = total mass``. Integer sums do not depend on summation order, so every
  implementation on every device takes the same decisions from the same noise and
  probabilities. The scaling is monotone, so probabilities that differ by rounding (a
  batched matmul, another device) flip a decision only with a probability of that order;
  the 2**-31 resolution is far below any sampling error a test could see.
* Temperature 0 (per request) turns the target distribution into a one-hot at the masked
  argmax, which makes tree speculative sampling take exactly the greedy decisions.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

from eagle_hal.errors import EagleHalError

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

__all__ = [
    "ACCEPT_DRAW_LIMIT",
    "ACCEPT_PROB_BITS",
    "ACCEPT_UNIFORM_SHIFT",
    "NO_NODE",
    "NO_TOKEN",
    "AcceptResult",
    "AcceptedPath",
    "DraftTree",
    "SamplingNoise",
    "SamplingOps",
    "TreeConfigError",
    "TreeShape",
    "TreeStep",
    "VerifyTree",
]

NO_NODE = -1  # "no such node": a leaf's next token, a last sibling, padding of accepted_nodes
NO_TOKEN = -1  # padding of token outputs past a request's accepted length
ACCEPT_PROB_BITS = 31  # acceptance compares floor(prob * 2**31) as integers
ACCEPT_UNIFORM_SHIFT = 31  # a draw's top 31 bits scale it into a range
ACCEPT_DRAW_LIMIT = 2**62  # accept draws are uniform integers in [0, 2**62)
MAX_TREE_NODES = 64  # the widest verify tree (N, root included) accepted; none wider is tested


class TreeConfigError(EagleHalError, ValueError):
    """A tree shape or an op's arguments are inconsistent (raised before any device work)."""


@dataclasses.dataclass(frozen=True, slots=True)
class TreeShape:
    """The speculative tree's geometry: draft steps ``S``, top-k ``K``, verify nodes ``N``.

    ``num_draft_tokens`` counts the root, so ``N = 1`` means no drafts (and is the only
    width of ``S = 0``). The drafts are chosen among ``K + (S - 1) * K * K`` candidates, so
    ``N - 1`` may not exceed that. ``K = 1`` is a chain: ``N = S + 1`` and every tree op
    degenerates to the identity layout. ``N`` is at most ``MAX_TREE_NODES``.
    """

    num_steps: int
    topk: int
    num_draft_tokens: int

    def __post_init__(self) -> None:
        steps, topk, nodes = self.num_steps, self.topk, self.num_draft_tokens
        if steps < 0:
            raise TreeConfigError(f"num_steps must be >= 0, got {steps}")
        if topk < 1:
            raise TreeConfigError(f"topk must be >= 1, got {topk}")
        if nodes < 1:
            raise TreeConfigError(f"num_draft_tokens must be >= 1, got {nodes}")
        if nodes > MAX_TREE_NODES:
            raise TreeConfigError(
                f"num_draft_tokens={nodes} is above the supported maximum of {MAX_TREE_NODES}"
            )
        if nodes - 1 > self.max_candidates:
            raise TreeConfigError(
                f"num_draft_tokens={nodes} asks for {nodes - 1} draft nodes, but S={steps} "
                f"steps of top-k={topk} yield at most {self.max_candidates} candidates "
                "(K + (S-1)*K*K); lower num_draft_tokens or raise num_steps/topk"
            )
        if steps > 0 and nodes < 2:
            raise TreeConfigError(
                f"num_steps={steps} drafts nothing with num_draft_tokens=1; "
                "speculation needs num_draft_tokens >= 2"
            )

    @property
    def max_candidates(self) -> int:
        if self.num_steps == 0:
            return 0
        return self.topk + (self.num_steps - 1) * self.topk * self.topk


class TreeStep(NamedTuple):
    """One step of draft-tree growth (``depth`` 1 for the root's children).

    The frontier (``scores``/``tokens``/``parent_branches``/``node_ids``, each ``[B, K]``) is
    what the next draft forward runs on: branch row ``b * K + k`` feeds ``tokens[b, k]`` with
    the hidden state of row ``b * K + parent_branches[b, k]`` of the previous step. The
    candidates (``[B, C]``; ``C = K`` at depth 1, ``K * K`` after) are what
    ``organize_draft_tree`` chooses from.
    """

    depth: int
    scores: torch.Tensor  # [B, K] float32 cumulative score of each frontier node
    tokens: torch.Tensor  # [B, K] int64
    parent_branches: torch.Tensor  # [B, K] int64 frontier row of the previous step (0 at depth 1)
    node_ids: torch.Tensor  # [B, K] int64 candidate id of each frontier node
    candidate_scores: torch.Tensor  # [B, C] float32
    candidate_tokens: torch.Tensor  # [B, C] int64
    candidate_parents: torch.Tensor  # [B, C] int64 candidate id of the parent (0 = root)


class DraftTree(NamedTuple):
    """The ``N - 1`` selected drafts, in increasing candidate id (parents first)."""

    tokens: torch.Tensor  # [B, N-1] int64
    parents: torch.Tensor  # [B, N-1] int64 verify node of the parent (0 = root); node i+1 <-> col i
    candidate_ids: torch.Tensor  # [B, N-1] int64 candidate id of each selected draft


class VerifyTree(NamedTuple):
    """The verify forward's inputs for ``N`` nodes per request (node 0 = root)."""

    tokens: torch.Tensor  # [B, N] int64
    positions: torch.Tensor  # [B, N] int64 seq_len + depth
    retrieve_index: torch.Tensor  # [B, N] int64 flat row b * N + i
    retrieve_next_token: torch.Tensor  # [B, N] int64 first child, or NO_NODE
    retrieve_next_sibling: torch.Tensor  # [B, N] int64 next sibling, or NO_NODE
    tree_mask: torch.Tensor  # layout given by mask_mode (see SamplingOps.build_verify_tree)
    mask_mode: str


class SamplingNoise(NamedTuple):
    """All randomness of one acceptance, drawn before the op so that it is reproducible.
    Both are int64 uniform in ``[0, ACCEPT_DRAW_LIMIT)``."""

    accept_draws: torch.Tensor  # [B, N] one coin per node (node c's acceptance test)
    bonus_draws: torch.Tensor  # [B] the bonus token's inverse-CDF draw


class AcceptResult(NamedTuple):
    """What one verify accepted, per request."""

    accepted_nodes: torch.Tensor  # [B, W] int64 root first, then the accepted drafts; NO_NODE pad
    accept_lens: torch.Tensor  # [B] int64 emitted tokens = accepted drafts + 1 bonus
    bonus_tokens: torch.Tensor  # [B] int64 the target's token after the last accepted node


class AcceptedPath(NamedTuple):
    """The accepted path moved to the front of each request's verify block."""

    tokens: torch.Tensor  # [B, W] int64 tokens of the accepted nodes (root first); NO_TOKEN pad
    hidden_index: torch.Tensor  # [B, W] int64 rows of [B * N] hidden states; pad repeats last
    kv_source: torch.Tensor  # [B, W] slots holding the accepted nodes' KV
    kv_destination: torch.Tensor  # [B, W] slots of positions seq_len .. seq_len + W - 1
    free_mask: torch.Tensor  # [B, N] bool: verify slots no longer needed after the move


class SamplingOps(abc.ABC):
    """Tree building, verification and bookkeeping for one decode iteration.

    Integer outputs are int64. Methods validate shapes and configuration (raising
    ``TreeConfigError``) but never values, which would need a host sync.
    """

    # -- draft side -----------------------------------------------------------------------

    @abc.abstractmethod
    def grow_tree_step(
        self, topk_probs: torch.Tensor, topk_ids: torch.Tensor, previous: TreeStep | None
    ) -> TreeStep:
        """Grow the draft tree by one depth.

        With ``previous=None`` (depth 1) ``topk_probs``/``topk_ids`` are the draft's top-K at
        the root, ``[B, K]``; the root's K children become the frontier with score = their
        probability. Otherwise they are the top-K of each frontier branch, ``[B * K, K]`` (or
        ``[B, K, K]``); each of the ``K * K`` children scores ``parent score * prob`` and the
        K best (ties to the lower index) become the new frontier. Pure; no effects.
        Raises ``TreeConfigError`` on mismatched shapes or a K different from ``previous``'s.
        """

    @abc.abstractmethod
    def organize_draft_tree(self, steps: Sequence[TreeStep], num_draft_tokens: int) -> DraftTree:
        """Choose the ``N - 1`` best-scored candidates of all ``steps`` (ties to the lower id),
        order them by candidate id and express each parent as a verify node index. Because
        scores never increase from parent to child, the selection is closed under parents.
        Raises ``TreeConfigError`` when ``N - 1`` exceeds the number of candidates."""

    @abc.abstractmethod
    def build_verify_tree(
        self,
        root_tokens: torch.Tensor,
        draft_tokens: torch.Tensor,
        draft_parents: torch.Tensor,
        seq_lens: torch.Tensor,
        mask_mode: str,
        seq_lens_sum: int | None = None,
    ) -> VerifyTree:
        """Lay out the verify tree: ``root_tokens [B]`` (the last accepted token, not cached),
        ``draft_tokens``/``draft_parents [B, N-1]`` (a ``DraftTree``), ``seq_lens [B]`` cached
        tokens per request (the root's position). Node i sees node j iff j is i or one of its
        ancestors. ``tree_mask`` by ``mask_mode`` (``eagle_hal.hal.tree_mask.TreeMaskMode``):

        * ``FULL``: bool, flat concatenation over requests of ``[N, seq_len_b + N]`` blocks
          (prefix columns all True, then the tree block); needs ``seq_lens_sum`` (host int).
        * ``TREE_BLOCK``: bool ``[B, N, N]``.
        * ``BIT_PACKED``: int64 ``[B, N]``, bit j of entry i set iff i sees j; needs N <= 64.

        Raises ``TreeConfigError`` for an unknown mode, N > 64 bit-packed, or FULL without
        ``seq_lens_sum``. Parents must precede children (``organize_draft_tree`` ensures it).
        """

    # -- target side ----------------------------------------------------------------------

    @abc.abstractmethod
    def masked_argmax(self, logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
        """``argmax`` over the first ``vocab_size`` entries of the last dim of ``logits``
        ``[..., V_padded]`` (ties to the lowest index); never returns an index in the padded
        tail. Returns int64 ``[...]``. Raises ``TreeConfigError`` unless
        ``1 <= vocab_size <= V_padded``."""

    @abc.abstractmethod
    def target_probs(
        self,
        logits: torch.Tensor,
        vocab_size: int,
        temperatures: torch.Tensor,
        top_ks: torch.Tensor,
        top_ps: torch.Tensor,
        min_ps: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The target distribution to sample from, float32 ``[B, ..., V_padded]`` from logits
        of the same shape; entries past ``vocab_size`` are 0. Per request (``[B]`` tensors):
        softmax of ``logits / temperature``, then keep the ``top_k`` most likely tokens
        (``top_k <= 0`` keeps all), then the smallest prefix of those whose renormalised mass
        reaches ``top_p`` (``top_p >= 1`` keeps all), then those whose probability is at least
        ``min_p`` times the most likely token's (``min_ps`` ``None``, or ``min_p <= 0``, keeps
        all; the most likely token always stays), renormalised. ``temperature <= 0`` gives
        the one-hot of ``masked_argmax`` (greedy requests in a mixed batch). The caller passes
        ``min_ps`` only for a batch with a request that sets min-p."""

    @abc.abstractmethod
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
        """Draw the noise of one acceptance. With ``seeds [B]`` (int64) the noise is a
        counter-based hash of ``(seed, counter, index)``: request b gets the same values in
        any batch; pass a fresh ``counter`` (int or ``[B]``, e.g. the sequence length) each
        iteration. Otherwise it comes from ``generator`` (the device's default if None)."""

    # -- acceptance -----------------------------------------------------------------------

    @abc.abstractmethod
    def verify_greedy(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_predict: torch.Tensor,
        num_steps: int,
    ) -> AcceptResult:
        """Accept the longest root-to-node path whose every token equals ``target_predict``
        (the target's masked argmax, ``[B, N]``) at its parent; the bonus is
        ``target_predict`` at the last accepted node. Siblings of a draft tree carry distinct
        tokens, so the path is unique; were they not, the first matching sibling is taken.
        ``accepted_nodes`` has ``num_steps + 1`` columns; the walk stops at depth
        ``num_steps``."""

    @abc.abstractmethod
    def verify_tree_sampling(
        self,
        tokens: torch.Tensor,
        retrieve_next_token: torch.Tensor,
        retrieve_next_sibling: torch.Tensor,
        target_probs: torch.Tensor,
        noise: SamplingNoise,
        num_steps: int,
    ) -> AcceptResult:
        """Tree speculative sampling with deterministic (one-hot) drafts, lossless.

        At the current node with target distribution ``p = target_probs[b, node]`` (``[B, N,
        V]``, from ``target_probs``), try the children in sibling order: child c is accepted
        with probability ``r(c) / Z`` where ``r`` is the residual (``p`` with the tokens of
        already-rejected siblings zeroed) and ``Z = total - rejected`` its mass; on
        acceptance descend, else try the next sibling. When none is accepted (or at a leaf)
        the bonus is drawn from the residual (``noise.bonus_draws``). Child c's coin is
        ``noise.accept_draws[b, c]``. Emitted tokens are distributed exactly as sampling from
        the target alone."""

    @abc.abstractmethod
    def verify_chain_sampling(
        self,
        tokens: torch.Tensor,
        draft_probs: torch.Tensor,
        target_probs: torch.Tensor,
        noise: SamplingNoise,
    ) -> AcceptResult:
        """Standard speculative (rejection) sampling on a chain (K = 1) with real draft
        distributions: ``tokens [B, N]`` (node i's parent is i - 1), ``draft_probs
        [B, N-1, V]`` (row i-1 is the distribution draft token i was sampled from),
        ``target_probs [B, N, V]``. Draft i is accepted with probability ``min(1, p/q)``; at
        the first rejection the bonus is drawn from ``max(0, p - q)`` renormalised (from
        ``p`` if that has no mass); if all are accepted, from ``p`` at the last node. Draft
        i's coin is ``noise.accept_draws[b, i]``."""

    # -- bookkeeping ----------------------------------------------------------------------

    @abc.abstractmethod
    def fill_bonus_tokens(
        self,
        tokens: torch.Tensor,
        accepted_nodes: torch.Tensor,
        accept_lens: torch.Tensor,
        bonus_tokens: torch.Tensor,
    ) -> torch.Tensor:
        """The tokens emitted this iteration, ``[B, W]``: the accepted drafts' tokens then the
        bonus at column ``accept_lens - 1``; ``NO_TOKEN`` after. Pure."""

    @abc.abstractmethod
    def compact_accepted(
        self,
        tokens: torch.Tensor,
        accepted_nodes: torch.Tensor,
        accept_lens: torch.Tensor,
        verify_slots: torch.Tensor,
    ) -> AcceptedPath:
        """Plan the move of the accepted path to the front of each request's verify block.
        ``verify_slots [B, N]`` holds node i's KV slot, which is the slot of position
        ``seq_len + i``. Moving ``kv_source -> kv_destination`` (read all sources before any
        write; padded columns are self-moves) puts path entry j's KV at position
        ``seq_len + j``. Pure; the caller performs the move."""

    @abc.abstractmethod
    def assign_verify_slots(
        self,
        req_to_token: torch.Tensor,
        table_rows: torch.Tensor,
        seq_lens: torch.Tensor,
        out_cache_loc: torch.Tensor,
    ) -> None:
        """Effect: ``req_to_token[table_rows[b], seq_lens[b] + i] = out_cache_loc[b*N+i]``
        for the N verify slots of each request (``out_cache_loc [B * N]``)."""

    @abc.abstractmethod
    def draft_kv_slots(
        self, scratch_slots: torch.Tensor, parent_branches: Sequence[torch.Tensor], step: int
    ) -> torch.Tensor:
        """The KV slots each DRAFT_DECODE branch row attends to at draft step ``step``
        (processing the frontier of depth ``step + 1``): ``[B * K, step + 1]``, row
        ``b * K + k`` = the scratch slots of its ancestors at depths ``1..step`` then its own.
        ``scratch_slots [B, S, K]`` is the slot of the draft token at depth ``d + 1``, branch
        k; ``parent_branches[d]`` is ``TreeStep.parent_branches`` of depth ``d + 1`` (entries
        ``1..step`` are read). Pure."""
