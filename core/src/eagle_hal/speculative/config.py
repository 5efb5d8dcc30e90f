"""Speculative-decoding settings: the tree's shape, and optionally the adaptive controller's.

``SpecConfig`` holds a ``TreeShape`` (S draft steps, K branches kept per step, N verify
nodes including the root: one order, one validation, ``hal.sampling.TreeShape``) and, for
the adaptive mode, an ``AdaptiveConfig``. The short form names the shape directly:

    SpecConfig(5)                        # a chain of S = 5 (N = S + 1)
    SpecConfig(5, 4, 16)                 # a tree: S = 5, K = 4, N = 16
    SpecConfig(5, adaptive=True)         # the adaptive mode over the default depths
    SpecConfig(shape=TreeShape(...), adaptive=AdaptiveConfig(steps=(0, 2, 4)))
"""

from __future__ import annotations

import dataclasses

from eagle_hal.hal.sampling import TreeShape

__all__ = ["AdaptiveConfig", "SpecConfig"]

# a tree's default width: K * S + 1 nodes, at most this many
DEFAULT_TREE_NODES = 16


@dataclasses.dataclass(frozen=True, slots=True)
class AdaptiveConfig:
    """The adaptive mode: the controller chooses S per batch-size bucket among ``steps`` by
    measured throughput (``speculative.adaptive``); at S = 0 the draft idles and catches
    up when speculation resumes. ``ema`` weighs each new observation, ``hysteresis`` is
    the margin a rival depth must beat. ``verify_budget``: the most tokens a verify pass
    takes over a batch bucket (see ``SpecConfig.with_steps``); ``None``: a tree keeps its
    width at every batch size."""

    steps: tuple[int, ...] = (0, 1, 3, 5)
    ema: float = 0.9
    hysteresis: float = 0.05
    verify_budget: int | None = None

    def __post_init__(self) -> None:
        if not self.steps or any(s < 0 for s in self.steps):
            raise ValueError(f"adaptive_steps must be a non-empty tuple of S >= 0, got "
                             f"{self.steps}")
        if not 0.0 < self.ema < 1.0:
            raise ValueError(f"adaptive_ema must lie in (0, 1), got {self.ema}")
        if self.verify_budget is not None and self.verify_budget < 1:
            raise ValueError(f"adaptive_verify_budget must be >= 1, got {self.verify_budget}")


def _default_nodes(steps: int, topk: int) -> int:
    """N when none is given: S + 1 for a chain, min(K * S + 1, 16) for a tree, 1 at S = 0."""
    if steps <= 0:
        return 1
    if topk == 1:
        return steps + 1
    candidates = topk + (steps - 1) * topk * topk
    return min(topk * steps + 1, DEFAULT_TREE_NODES, candidates + 1)


@dataclasses.dataclass(frozen=True, slots=True, init=False)
class SpecConfig:
    """EAGLE speculative settings (see the module docstring).

    ``num_steps == 0`` is plain decoding (a draft, if given, is not run). ``topk == 1`` is
    a chain, for which N must be S + 1. ``num_draft_tokens`` ``None``: the default for the
    shape, recomputed when the depth changes (``with_steps``, ``with_settings``); given, it
    is kept, or capped to what a new depth can hold. ``adaptive``: ``True`` (or an
    ``AdaptiveConfig``, then held as ``adaptive_config``) lets the controller choose S; the
    ``adaptive_*`` keywords fill the ``AdaptiveConfig`` of ``adaptive=True``.
    """

    shape: TreeShape
    adaptive_config: AdaptiveConfig | None  # ``None``: a fixed depth
    default_nodes: bool  # N was left to the shape's default

    def __init__(
        self,
        num_steps: int = 5,
        topk: int = 1,
        num_draft_tokens: int | None = None,
        adaptive: bool | AdaptiveConfig | None = False,
        adaptive_steps: tuple[int, ...] = (0, 1, 3, 5),
        adaptive_ema: float = 0.9,
        adaptive_hysteresis: float = 0.05,
        adaptive_verify_budget: int | None = None,
        *,
        shape: TreeShape | None = None,
    ) -> None:
        if shape is not None:
            num_steps, topk, num_draft_tokens = shape.num_steps, shape.topk, shape.num_draft_tokens
        nodes = _default_nodes(num_steps, topk) if num_draft_tokens is None else num_draft_tokens
        if adaptive is True:
            adaptive = AdaptiveConfig(tuple(adaptive_steps), adaptive_ema, adaptive_hysteresis,
                                      adaptive_verify_budget)
        elif not adaptive:
            adaptive = None
            if adaptive_verify_budget is not None and adaptive_verify_budget < 1:
                raise ValueError(f"adaptive_verify_budget must be >= 1, got "
                                 f"{adaptive_verify_budget}")
        object.__setattr__(self, "shape", shape or TreeShape(num_steps, topk, nodes))
        object.__setattr__(self, "adaptive_config", adaptive)
        object.__setattr__(self, "default_nodes", num_draft_tokens is None)

    # -- the shape -------------------------------------------------------------------------------

    @property
    def num_steps(self) -> int:
        """S, the draft depth."""
        return self.shape.num_steps

    @property
    def topk(self) -> int:
        """K, the branches kept per draft step."""
        return self.shape.topk

    @property
    def draft_tokens(self) -> int:
        """N, the verify-tree size including the root."""
        return self.shape.num_draft_tokens

    @property
    def num_draft_tokens(self) -> int | None:
        """N as given (``None``: the shape's default, ``draft_tokens``)."""
        return None if self.default_nodes else self.shape.num_draft_tokens

    @property
    def max_candidates(self) -> int:
        """Draft nodes S steps of top-K can produce: K at step 0, K*K at each later step."""
        return self.shape.max_candidates

    # -- the adaptive mode -----------------------------------------------------------------------

    @property
    def adaptive(self) -> bool:
        """Whether the adaptive controller chooses S (``adaptive_config``)."""
        return self.adaptive_config is not None

    @property
    def adaptive_steps(self) -> tuple[int, ...]:
        return (self.adaptive_config or AdaptiveConfig()).steps

    @property
    def adaptive_ema(self) -> float:
        return (self.adaptive_config or AdaptiveConfig()).ema

    @property
    def adaptive_hysteresis(self) -> float:
        return (self.adaptive_config or AdaptiveConfig()).hysteresis

    @property
    def adaptive_verify_budget(self) -> int | None:
        config = self.adaptive_config
        return config.verify_budget if config is not None else None

    # -- derived settings ------------------------------------------------------------------------

    def _with(self, steps: int, topk: int, nodes: int | None,
              adaptive: AdaptiveConfig | None) -> SpecConfig:
        return SpecConfig(steps, topk, nodes, adaptive)

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
        return self._with(num_steps, branches, n, self.adaptive_config)

    def with_steps(self, num_steps: int, batch: int | None = None) -> SpecConfig:
        """The same tree shape at another depth (N rescaled for chains, capped for trees):
        the settings of one iteration at the depth the adaptive controller chose.

        With ``adaptive.verify_budget`` and ``batch`` (the batch-size bucket), a tree whose
        verify pass would take more tokens than the budget over the batch (batch x N) is
        narrowed to ``budget // batch`` nodes, at least S + 1 (the most a path accepts).
        Its K stays: the draft's state keeps K candidates whatever the iteration's shape.
        Wide trees pay at small batches, where a verify pass costs what its weights cost
        to read, but past that their extra rows cost compute a narrow one does not spend
        (``eagle-hal bench --batch-sizes 64 --modes plain,chain:S3,tree:S3K4N16,adaptive``
        on an H200: a chain of S = 3 ran 1.14x plain decoding, the adaptive mode's K = 4,
        N = 16 trees never above 1.00x).
        """
        spec = self
        if num_steps != self.num_steps:
            n = None
            if self.num_draft_tokens is not None and num_steps > 0:
                cap = self.topk + (num_steps - 1) * self.topk * self.topk + 1
                n = num_steps + 1 if self.topk == 1 else min(self.num_draft_tokens, cap)
            spec = self._with(num_steps, self.topk, n, None)
        budget = self.adaptive_verify_budget
        if budget is None or batch is None or num_steps == 0 \
                or batch * spec.draft_tokens <= budget:
            return spec
        return self._with(num_steps, spec.topk, max(num_steps + 1, budget // batch),
                          spec.adaptive_config)
