"""What the adaptive controller (``speculative.adaptive``) keeps per batch-size bucket: each
candidate depth's moving averages (accept length, over a recent and a long memory; the
wall time of an iteration) and the bucket's schedule (warm-up or probe plan, settled
depth, probe pacing, the switch it is rechecking).
"""

from __future__ import annotations

import dataclasses

__all__ = ["Bucket", "DepthStats"]


@dataclasses.dataclass(slots=True)
class DepthStats:
    """Moving averages of one depth in one bucket."""

    accept: float = 0.0  # recent accept length (the same memory as ``seconds``)
    seconds: float = 0.0
    samples: int = 0  # timed samples folded in (cut back to a few when a probe starts)
    accept_long: float = 0.0  # accept length over up to ``accept_memory`` samples
    long_samples: int = 0
    seen: int = 0  # iterations observed, the untimed settling one included
    rejected: int = 0  # outliers left out in a row (see AdaptiveController.outlier)

    @property
    def throughput(self) -> float | None:
        if self.samples == 0 or self.seconds <= 0:
            return None
        return self.accept_long / self.seconds

    @property
    def cautious_throughput(self) -> float | None:
        """The lower of the rates by the long and the recent accept length: a depth not run
        for a while is rated above the settled one only where both say so (a draft that
        stopped matching leaves a stale long accept length behind)."""
        if self.samples == 0 or self.seconds <= 0:
            return None
        return min(self.accept_long, self.accept) / self.seconds


@dataclasses.dataclass(slots=True)
class Bucket:
    stats: dict[int, DepthStats]
    plan: list[int]  # depths to run next (warm-up or probe), front first
    settled: int | None = None  # None while warming up
    probe_interval: int = 0
    since_probe: int = 0
    probes: int = 0
    probe_cost: float = 0.0  # seconds the running probe spent beyond the settled depth
    first_probe: int | None = None  # a seeded bucket's early probe, ahead of the round robin
    recheck: bool = False  # the running probe re-measures a depth rated above the settled one
    since_recheck: int = 0
    accept_memory: float = 1.0  # samples the long accept length spans at this batch size
    iterations: int = 0  # iterations observed in this bucket
    size: int = 0  # the bucket's batch size (its key)
