"""Speculative-decoding settings: how many draft steps, how wide, how many verify tokens."""

from __future__ import annotations

import dataclasses

__all__ = ["SpecConfig"]


@dataclasses.dataclass(frozen=True, slots=True)
class SpecConfig:
    """EAGLE tree settings.

    ``num_steps`` (S) draft levels, ``topk`` (K) branches kept per level, ``num_draft_tokens``
    (N) verify-tree nodes including the root. ``num_steps == 0`` is plain decoding (a draft,
    if given, is not run). ``topk == 1`` is a chain, for which N must be S + 1. ``adaptive``
    lets the controller choose S per batch-size bucket among ``adaptive_steps`` by measured
    throughput; at S = 0 the draft idles and catches up when speculation resumes.
    ``adaptive_verify_budget``: the most tokens the adaptive mode's verify pass takes over
    a batch bucket (see ``with_steps``); ``None``: the tree keeps its width at every batch.
    """

    num_steps: int = 5
    topk: int = 1
    num_draft_tokens: int | None = None  # default: S + 1 for chains, min(K*S+1, 16) for trees
    adaptive: bool = False
    adaptive_steps: tuple[int, ...] = (0, 1, 3, 5)
    adaptive_ema: float = 0.9
    adaptive_hysteresis: float = 0.05
    adaptive_verify_budget: int | None = None

    def __post_init__(self) -> None:
        if self.num_steps < 0:
            raise ValueError(f"num_steps must be >= 0, got {self.num_steps}")
        if self.topk < 1:
            raise ValueError(f"topk must be >= 1, got {self.topk}")
        n = self.draft_tokens
        if n < 1:
            raise ValueError(f"num_draft_tokens must be >= 1, got {n}")
        if n - 1 > self.max_candidates:
            raise ValueError(
                f"num_draft_tokens={n} asks for {n - 1} draft nodes, but S={self.num_steps} "
                f"steps of top-k={self.topk} yield at most {self.max_candidates}; "
                f"lower num_draft_tokens or raise num_steps/topk"
            )
        if self.num_steps > 0 and n < 2:
            raise ValueError("speculation with num_steps > 0 needs num_draft_tokens >= 2")
        if n > 64:
            raise ValueError(f"num_draft_tokens={n} is above the supported maximum of 64")
        if self.adaptive_verify_budget is not None and self.adaptive_verify_budget < 1:
            raise ValueError(
                f"adaptive_verify_budget must be >= 1, got {self.adaptive_verify_budget}"
            )
        if self.adaptive:
            if not self.adaptive_steps or any(s < 0 for s in self.adaptive_steps):
                raise ValueError("adaptive_steps must be a non-empty tuple of S >= 0")
            if not 0.0 < self.adaptive_ema < 1.0:
                raise ValueError("adaptive_ema must lie in (0, 1)")

    @property
    def max_candidates(self) -> int:
        """Draft nodes S steps of top-K can produce: K at step 0, K*K at each later step."""
        if self.num_steps == 0:
            return 0
        return self.topk + (self.num_steps - 1) * self.topk * self.topk

    @property
    def draft_tokens(self) -> int:
        """N, the verify-tree size including the root."""
        if self.num_draft_tokens is not None:
            return self.num_draft_tokens
        if self.num_steps == 0:
            return 1
        if self.topk == 1:
            return self.num_steps + 1
        return min(self.topk * self.num_steps + 1, 16, self.max_candidates + 1)

    @property
    def is_chain(self) -> bool:
        return self.topk == 1

    def with_settings(self, steps: int | None = None, topk: int | None = None,
                      draft_tokens: int | None = None) -> SpecConfig:
        """These settings over this spec (``None``: keep this one's). N stays this spec's
        only where S and K do; otherwise it is the one given, or the default for the new
        shape (a chain's S + 1, a tree's min(K * S + 1, 16)), so that a default N never
        lands on a shape it does not fit."""
        num_steps = self.num_steps if steps is None else steps
        branches = self.topk if topk is None else topk
        n = draft_tokens
        if n is None and (num_steps, branches) == (self.num_steps, self.topk):
            n = self.num_draft_tokens
        return dataclasses.replace(self, num_steps=num_steps, topk=branches, num_draft_tokens=n)

    def with_steps(self, num_steps: int, batch: int | None = None) -> SpecConfig:
        """The same tree shape at another depth (N rescaled for chains, capped for trees).

        With ``adaptive_verify_budget`` and ``batch`` (the batch-size bucket), a tree whose
        verify pass would take more tokens than the budget over the batch (batch x N) is
        narrowed to ``budget // batch`` nodes, at least S + 1 (the most a path accepts).
        Its K stays: the draft's state keeps K candidates whatever the iteration's shape.
        Wide trees pay at small batches, where a verify pass costs what its weights cost
        to read, but past that their extra rows cost compute a narrow one does not spend
        (the H200 at batch 64: a chain of S = 3 ran 1.14x plain decoding, the adaptive
        mode's K = 4, N = 16 trees never above 1.00x).
        """
        spec = self
        if num_steps != self.num_steps:
            n = None
            if self.num_draft_tokens is not None and num_steps > 0:
                cap = self.topk + (num_steps - 1) * self.topk * self.topk + 1
                n = num_steps + 1 if self.topk == 1 else min(self.num_draft_tokens, cap)
            spec = dataclasses.replace(self, num_steps=num_steps, num_draft_tokens=n,
                                       adaptive=False)
        budget = self.adaptive_verify_budget
        if budget is None or batch is None or num_steps == 0 \
                or batch * spec.draft_tokens <= budget:
            return spec
        return dataclasses.replace(spec, num_draft_tokens=max(num_steps + 1, budget // batch))
