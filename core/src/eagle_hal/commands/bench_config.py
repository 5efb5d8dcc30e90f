"""What ``eagle-hal bench`` measures: modes, each with its own spec settings, and batch sizes."""

from __future__ import annotations

import dataclasses
import re
from collections import Counter
from collections.abc import Mapping
from typing import Any

__all__ = ["HEADLESS", "KINDS", "BenchConfig", "MODES", "mode_spec"]

MODES = ("plain", "chain", "tree", "adaptive")  # what a run measures unless told
# every mode kind: ``ngram`` (``speculative.ngram``) and ``self`` (the target's first L
# layers, ``speculative.self_draft``) draft with no head, so they are asked for
KINDS = (*MODES, "ngram", "self")
HEADLESS = ("plain", "ngram", "self")  # the kinds that run without a head


@dataclasses.dataclass(frozen=True, slots=True)
class BenchConfig:
    """What to measure. Spec settings, per mode kind: the mode's own after a colon
    (``mode_spec``: ``chain:S5``, ``tree:S8K4N48``, ``chain:S5V8192``, V the draft
    vocabulary's size, see ``eagle_hal.model.draft_vocab``; the same kind may then appear
    more than once), over the run's ``steps``/``topk``/``draft_tokens`` (``None``: not
    given; ``topk`` and ``draft_tokens`` apply to ``tree`` and ``adaptive`` only), over
    ``base_specs[kind]``: the backend's default spec of the kind
    (``Backend.default_spec``; where left out, the library's: a chain of S = 5, trees of
    S = 5, K = 4, N = 16). ``draft_vocab``: the draft vocabulary of modes that name none.
    ``ngram`` modes propose by prompt lookup instead of the head: ``ngram:S5K2M3`` (M the
    longest match, default 3; K the continuations per node, default 1; S, N as above,
    over the chain's or, at K > 1, the tree's base spec). ``self`` modes draft a chain with
    the target's first L layers: ``self:S4L8`` (L required). ``T``, a chain's or a tree's
    oracle accept length (``chain:S5T4``; ``oracle_for``): benchmarks of the engine's cost
    only, never a speedup."""

    modes: tuple[str, ...] = MODES
    batch_sizes: tuple[int, ...] = (1,)
    max_new_tokens: int = 256
    steps: int | None = None
    topk: int | None = None
    draft_tokens: int | None = None
    graphs: bool = True
    split_timing: bool = True
    repeats: int = 3
    seed: int = 0
    draft_vocab: int | str = "auto"
    base_specs: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        unknown = {m.partition(":")[0] for m in self.modes} - set(KINDS)
        if unknown or not self.modes:
            raise ValueError(f"unknown modes {sorted(unknown)}; choose from {', '.join(KINDS)}")
        repeated = sorted(m for m, n in Counter(self.modes).items() if n > 1)
        if repeated:
            raise ValueError(f"modes {repeated} are given more than once")
        for mode in self.modes:
            self.spec_for(mode)  # every mode's settings valid before anything loads
            self.draft_vocab_for(mode)
            self.oracle_for(mode)
        if not self.batch_sizes or any(b < 1 for b in self.batch_sizes):
            raise ValueError(f"batch sizes must be >= 1, got {self.batch_sizes}")
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")

    def spec_for(self, mode: str) -> Any:
        """The ``SpecConfig`` of ``mode``: its own settings (``mode_spec``) over the run's
        over the base spec of its kind."""
        from eagle_hal.speculative.config import SpecConfig

        kind, given = mode_spec(mode)
        given.pop("V", None)
        given.pop("T", None)
        if "M" in given and kind != "ngram":
            raise ValueError(f"mode {mode!r}: M (the longest match) is an ngram mode's")
        given.pop("M", None)
        if ("L" in given) != (kind == "self"):
            raise ValueError(f"mode {mode!r}: L (the layers drafting) is a self mode's, "
                             "and a self mode's is required")
        if kind == "self":
            if given.get("K", 1) != 1 or given.pop("L") < 1:
                raise ValueError(f"mode {mode!r}: a self mode drafts a chain (K = 1) with "
                                 "L >= 1 layers")
            return self._base("chain").with_settings(given.get("S", self.steps), 1,
                                                     given.get("N"))
        if kind == "ngram":
            topk = given.get("K", 1)
            return self._base("chain" if topk == 1 else "tree").with_settings(
                given.get("S", self.steps), topk, given.get("N"))
        if kind == "plain":
            if given:
                raise ValueError(f"mode {mode!r}: plain decoding takes no spec settings")
            return SpecConfig(num_steps=0)
        steps = given.get("S", self.steps)
        if kind == "chain":
            if given.get("K", 1) != 1:
                raise ValueError(f"mode {mode!r}: a chain has K = 1")
            return self._base("chain").with_settings(steps, 1, given.get("N"))
        return self._base(kind).with_settings(
            steps, given.get("K", self.topk), given.get("N", self.draft_tokens))

    def _base(self, kind: str) -> Any:
        """The base spec of ``kind``: ``base_specs``' or the library's default."""
        if self.base_specs is not None and kind in self.base_specs:
            return self.base_specs[kind]
        from eagle_hal.backends.defaults import library_default_spec

        return library_default_spec(kind)

    def oracle_for(self, mode: str) -> int | None:
        """A mode's oracle accept length ``T`` (``speculative.oracle_accept``: every verify
        accepts exactly T - 1 drafts plus the bonus token, which measures the engine's cost
        at that accept length, never a speedup), ``None`` where it names none. Only chains
        and trees take one, between 1 and S + 1."""
        kind, given = mode_spec(mode)
        tau = given.get("T")
        if tau is None:
            return None
        if kind not in ("chain", "tree"):
            raise ValueError(f"mode {mode!r}: an oracle accept length T is a chain's or a "
                             "tree's")
        steps = self.spec_for(mode).num_steps
        if not 1 <= tau <= steps + 1:
            raise ValueError(f"mode {mode!r}: T must lie in [1, S + 1] = [1, {steps + 1}]")
        return tau

    def ngram_for(self, mode: str) -> tuple[int, int]:
        """An ``ngram`` mode's longest match M and continuations per node K."""
        from eagle_hal.speculative.ngram import DEFAULT_MAX_NGRAM, parse_ngram

        _, given = mode_spec(mode)
        # parse_ngram checks the ranges
        return parse_ngram(f"mode {mode}", f"ngram:{given.get('M', DEFAULT_MAX_NGRAM)},"
                                           f"{given.get('K', 1)}")

    def self_layers_for(self, mode: str) -> int:
        """A ``self`` mode's L: the target's layers the draft runs."""
        return mode_spec(mode)[1]["L"]

    def draft_vocab_for(self, mode: str) -> int | str:
        """The draft vocabulary ``mode`` drafts from: its V, else the run's ``draft_vocab``
        (``"full"`` for an ``ngram`` mode, which drafts with no head)."""
        from eagle_hal.model.draft_vocab import parse_size

        kind, given = mode_spec(mode)
        if kind == "ngram":
            if "V" in given:
                raise ValueError(f"mode {mode!r}: an ngram mode drafts with no head, so "
                                 "takes no V")
            self.ngram_for(mode)
            return "full"
        if kind == "self":
            if "V" in given:
                raise ValueError(f"mode {mode!r}: a self mode drafts from the target's own "
                                 "lm_head, so takes no V")
            return "full"
        if kind == "plain" and "V" in given:
            raise ValueError(f"mode {mode!r}: plain decoding drafts nothing, so takes no V")
        size = parse_size(given.get("V", self.draft_vocab))
        if kind != "plain" and isinstance(size, int) and size < self.spec_for(mode).topk:
            raise ValueError(f"mode {mode!r}: a draft vocabulary of {size} tokens cannot give "
                             f"top-{self.spec_for(mode).topk} branches")
        return size


def mode_spec(mode: str) -> tuple[str, dict[str, int]]:
    """Split a mode as given to ``--modes`` into its kind and its own spec settings:
    ``"tree:S8K4N48"`` -> ``("tree", {"S": 8, "K": 4, "N": 48})``; ``"plain"`` ->
    ``("plain", {})``. S is the draft depth, K the branches, N the verify tokens, V the
    draft vocabulary's size, M an ngram mode's longest match, L a self mode's layers, T an
    oracle accept length (``BenchConfig.oracle_for``); any
    may be left out (the run's ``--spec-*`` and ``--draft-vocab`` values apply) but a self
    mode's L, none given twice."""
    kind, colon, settings = mode.partition(":")
    given: dict[str, int] = {}
    if colon:
        parts = re.findall(r"([A-Za-z])(\d+)", settings)
        if not parts or "".join(k + v for k, v in parts) != settings:
            raise ValueError(f"mode {mode!r}: settings must read like S8K4N48 (S depth, "
                             f"K branches, N verify tokens, V draft vocabulary, M longest "
                             f"match, L self-draft layers, T oracle accept length), got "
                             f"{settings!r}")
        for key, value in parts:
            key = key.upper()
            if key not in "SKNVMLT" or key in given:
                raise ValueError(f"mode {mode!r}: {key!r} is not one of S, K, N, V, M, L, "
                                 "T once each")
            given[key] = int(value)
    return kind, given
