"""What the draft has not seen yet: tokens emitted while speculation was off (S = 0).

An iteration at S = 0 costs what plain decoding costs: the draft does not run. Instead the
worker records, per request, each emitted token with the target's projected feature of
the position before it (computed by the verify pass anyway, kept on the device). Before the
next iteration with S > 0, one ragged DRAFT_EXTEND per batch consumes every request's
pending pairs from the draft's cached length, leaving the same draft KV and ``DraftState``
as if the draft had followed along every iteration.

Invariant per pending request: the draft has consumed positions ``0 .. draft_len - 1``;
pending token i sits at target position ``draft_len + i + 1`` and its feature at
``draft_len + i``, so after the catch-up the draft's cached length is the request's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import NamedTuple

import torch

__all__ = ["CatchUp", "CatchUpTotals", "PendingDraftInputs"]

# The feature log is compacted to its live rows when it holds at least this many rows and
# at least twice its live ones: under continuous batching some request is always pending,
# so without it the rows of taken and dropped requests would accumulate without bound.
_COMPACT_MIN_ROWS = 4096


class CatchUp(NamedTuple):
    """One ragged draft extend over the pending pairs of some requests."""

    request_ids: list[int]
    draft_lens: list[int]  # [B'] the draft's cached length per request (the extend's prefix)
    extend_lens: list[int]  # [B'] pending pairs per request
    input_ids: list[int]  # [T] pending tokens, request-major
    features: torch.Tensor  # [T, H] their features, same order


@dataclasses.dataclass(slots=True)
class CatchUpTotals:
    """Catch-ups run and the pending tokens they extended the draft over (diagnostics:
    each one is an eager ragged draft forward whose shape the warm-up may never have had)."""

    catch_ups: int = 0
    tokens: int = 0

    def record(self, tokens: int) -> None:
        self.catch_ups += 1
        self.tokens += tokens


@dataclasses.dataclass(slots=True)
class _Pending:
    draft_len: int
    tokens: list[int] = dataclasses.field(default_factory=list)
    rows: list[int] = dataclasses.field(default_factory=list)  # rows of the feature log


class PendingDraftInputs:
    """Per request, the (token, feature) pairs emitted since the draft last caught up."""

    def __init__(self) -> None:
        self._log: list[torch.Tensor] = []  # feature rows of the idle iterations, [B_i, H] each
        self._log_rows = 0
        self._live_rows = 0  # rows some pending request still refers to
        self._requests: dict[int, _Pending] = {}

    def __contains__(self, request_id: int) -> bool:
        return request_id in self._requests

    def __len__(self) -> int:
        return len(self._requests)

    def lag(self, request_id: int) -> int:
        """Pending pairs of a request (0 when it is caught up)."""
        pending = self._requests.get(request_id)
        return len(pending.tokens) if pending is not None else 0

    def add(
        self,
        request_ids: Sequence[int],
        draft_lens: Sequence[int],
        tokens: Sequence[int],
        features: torch.Tensor,
    ) -> None:
        """Record one idle iteration: request b emitted ``tokens[b]``, whose feature row is
        ``features[b]`` (``[B, H]``, copied: the caller's buffer may be reused).
        ``draft_lens[b]`` is the request's cached length before the iteration, which is
        the draft's when the request was caught up."""
        for b, request_id in enumerate(request_ids):
            pending = self._requests.get(request_id)
            if pending is None:
                pending = self._requests[request_id] = _Pending(draft_lens[b])
            pending.tokens.append(tokens[b])
            pending.rows.append(self._log_rows + b)
        self._log.append(features.clone())
        self._log_rows += features.shape[0]
        self._live_rows += len(request_ids)
        if self._log_rows >= max(_COMPACT_MIN_ROWS, 2 * self._live_rows):
            self._compact()

    @property
    def log_rows(self) -> int:
        """Feature rows held (live or not yet compacted away)."""
        return self._log_rows

    def _compact(self) -> None:
        """Keep only the rows pending requests refer to, renumbered in request order."""
        table = torch.cat(self._log)  # [R, H]
        rows = [row for p in self._requests.values() for row in p.rows]
        index = torch.tensor(rows, dtype=torch.int64).to(table.device, non_blocking=True)
        self._log = [table.index_select(0, index)]
        start = 0
        for pending in self._requests.values():
            count = len(pending.rows)
            pending.rows = list(range(start, start + count))
            start += count
        self._log_rows = self._live_rows = start

    def take(self, request_ids: Sequence[int]) -> CatchUp | None:
        """Remove and return the pending pairs of those of ``request_ids`` that lag, in
        their order; ``None`` when none does."""
        lagging = [r for r in request_ids if r in self._requests]
        if not lagging:
            return None
        parts = [self._requests.pop(r) for r in lagging]
        self._live_rows -= sum(len(p.rows) for p in parts)
        table = self._log[0] if len(self._log) == 1 else torch.cat(self._log)  # [R, H]
        rows = [row for p in parts for row in p.rows]
        if rows != list(range(rows[0], rows[0] + len(rows))):
            index = torch.tensor(rows, dtype=torch.int64).to(table.device, non_blocking=True)
            features = table.index_select(0, index)
        else:  # one idle iteration over the same batch: already in order
            features = table[rows[0] : rows[0] + len(rows)]
        if not self._requests:
            self._log, self._log_rows, self._live_rows = [], 0, 0
        return CatchUp(
            lagging,
            [p.draft_len for p in parts],
            [len(p.tokens) for p in parts],
            [t for p in parts for t in p.tokens],
            features,
        )

    def drop(self, request_id: int) -> None:
        """Forget a request's pairs (finished, cancelled, or re-prefilled from scratch)."""
        pending = self._requests.pop(request_id, None)
        if pending is not None:
            self._live_rows -= len(pending.rows)
        if not self._requests:
            self._log, self._log_rows, self._live_rows = [], 0, 0
