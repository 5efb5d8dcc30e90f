"""Where a run's wall time went: per engine step, by kind, batch-size bucket and draft depth.

A benchmark compares modes by their total tokens/s; when one mode loses, the total does not
say where. The ledger splits a run's time the way the adaptive controller decides (per
batch-size bucket, per depth), for every mode alike, so that a plain run and an adaptive
run of the same prompts can be compared bucket by bucket: tokens/s at batch 64 under plain
decoding against the adaptive mode's at batch 64, and within it each depth's share.

Each step is charged the time since the previous step ended (so the host's work between
steps, on the tokens the last step emitted, counts as it does in the run's total), and the
first step the time since ``start``. The periods of all steps add up to the run's wall
time up to the last step's end. With one iteration in flight (``speculative.overlap``) a step's
tokens are those of the iteration before it: the bucket is the step's batch, which differs
from that iteration's only where the batch changed between them.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

__all__ = ["StepLedger", "batch_bucket"]


def batch_bucket(batch_size: int) -> int:
    """The power of two at or above ``batch_size`` (the adaptive controller's buckets)."""
    return 1 << max(batch_size - 1, 0).bit_length()


@dataclasses.dataclass(slots=True)
class _Account:
    seconds: float = 0.0
    tokens: int = 0
    steps: int = 0
    requests: int = 0  # the steps' batch sizes summed (mean batch = requests / steps)


class StepLedger:
    """Accounts of wall time, emitted tokens and steps per (kind, bucket, depth)."""

    def __init__(self) -> None:
        self.accounts: dict[tuple[str, int, int | None], _Account] = {}
        self.last: float | None = None

    def start(self, now: float | None = None) -> None:
        """The run starts: the first step's period begins here."""
        self.last = time.perf_counter() if now is None else now

    def record(self, kind: str, batch_size: int, depth: int | None, tokens: int,
               now: float | None = None) -> None:
        """A step of ``kind`` (``"prefill"``, ``"decode"``) over ``batch_size`` requests
        at draft ``depth`` (``None`` for prefill) emitted ``tokens`` and ended ``now``."""
        now = time.perf_counter() if now is None else now
        since = now if self.last is None else self.last
        key = (kind, batch_bucket(batch_size), depth)
        account = self.accounts.setdefault(key, _Account())
        account.seconds += now - since
        account.tokens += tokens
        account.steps += 1
        account.requests += batch_size
        self.last = now

    def summary(self) -> dict[str, Any]:
        """``{kind: {bucket: {"seconds", "tokens", "steps", "tokens_per_s", "mean_batch",
        "by_depth": {depth: {...}}}}}``, buckets and depths as strings (JSON keys); prefill
        has no ``by_depth``. ``mean_batch``: the steps' mean batch size, which a bucket's
        depths may not share (a bucket spans sizes up to 2x apart, and where a step's time
        grows with its batch, as on the CPU, tokens/s compares depths only at like sizes)."""
        out: dict[str, Any] = {}
        for (kind, bucket, depth), account in sorted(
                self.accounts.items(), key=lambda item: (item[0][0], item[0][1], item[0][2] or 0)):
            row = out.setdefault(kind, {}).setdefault(str(bucket), _totals(_Account()))
            row["seconds"] += account.seconds
            row["tokens"] += account.tokens
            row["steps"] += account.steps
            row["tokens_per_s"] = row["tokens"] / row["seconds"] if row["seconds"] > 0 else None
            row["mean_batch"] = (row["mean_batch"] * (row["steps"] - account.steps)
                                 + account.requests) / row["steps"]
            if depth is not None:
                row.setdefault("by_depth", {})[str(depth)] = _totals(account)
        return out


def _totals(account: _Account) -> dict[str, Any]:
    return {"seconds": account.seconds, "tokens": account.tokens, "steps": account.steps,
            "tokens_per_s": account.tokens / account.seconds if account.seconds > 0 else None,
            "mean_batch": account.requests / account.steps if account.steps else 0.0}
