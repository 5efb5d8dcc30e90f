"""Adaptive speculation depth: pick S per batch-size bucket so speculation pays for itself.

The controller keeps, per batch-size bucket, an exponential moving average of

* the per-token acceptance rate ``alpha``, inferred from observed accept lengths with the
  chain model ``E[accept | S] = (1 - alpha^(S+1)) / (1 - alpha)`` (bonus token included), and
* the wall time of one iteration at each depth S it has run.

Expected throughput at depth S is ``E[accept | S] / time(S)``; time at a depth not yet seen
is extrapolated linearly from the seen ones (verify cost plus S draft steps). The controller
moves to a better S only when the predicted gain exceeds the hysteresis margin, and while it
sits at S = 0 (where acceptance is unobservable) it re-tries the smallest positive S every
``probe_interval`` iterations so it can notice that speculation pays again.
"""

from __future__ import annotations

import dataclasses

__all__ = ["AdaptiveController", "expected_accept_length", "infer_acceptance_rate"]


def expected_accept_length(alpha: float, steps: int) -> float:
    """Tokens per verify for a chain of ``steps`` drafts with per-token acceptance ``alpha``."""
    if steps <= 0:
        return 1.0
    if alpha >= 1.0:
        return float(steps + 1)
    return (1.0 - alpha ** (steps + 1)) / (1.0 - alpha)


def infer_acceptance_rate(accept_length: float, steps: int) -> float | None:
    """Invert ``expected_accept_length`` by bisection; ``None`` when S = 0 tells nothing."""
    if steps <= 0:
        return None
    target = min(max(accept_length, 1.0), steps + 1.0)
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        if expected_accept_length(mid, steps) < target:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


@dataclasses.dataclass(slots=True)
class _Bucket:
    steps: int
    alpha: float
    times: dict[int, float] = dataclasses.field(default_factory=dict)
    since_probe: int = 0
    iterations: int = 0


class AdaptiveController:
    """Chooses the number of draft steps per batch-size bucket."""

    def __init__(
        self,
        candidates: tuple[int, ...],
        *,
        initial_steps: int | None = None,
        ema: float = 0.9,
        hysteresis: float = 0.15,
        prior_alpha: float = 0.6,
        buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
        probe_interval: int = 64,
        warmup_iterations: int = 4,
    ) -> None:
        if not candidates:
            raise ValueError("the adaptive controller needs at least one candidate depth")
        self.candidates = tuple(sorted(set(candidates)))
        self.initial_steps = max(self.candidates) if initial_steps is None else initial_steps
        if self.initial_steps not in self.candidates:
            raise ValueError(f"initial depth {self.initial_steps} is not among {self.candidates}")
        self.ema = ema
        self.hysteresis = hysteresis
        self.prior_alpha = prior_alpha
        self.bucket_sizes = buckets
        self.probe_interval = probe_interval
        self.warmup_iterations = warmup_iterations
        self._buckets: dict[int, _Bucket] = {}

    def bucket_of(self, batch_size: int) -> int:
        for size in self.bucket_sizes:
            if batch_size <= size:
                return size
        return self.bucket_sizes[-1]

    def _bucket(self, batch_size: int) -> _Bucket:
        key = self.bucket_of(batch_size)
        if key not in self._buckets:
            self._buckets[key] = _Bucket(steps=self.initial_steps, alpha=self.prior_alpha)
        return self._buckets[key]

    def choose(self, batch_size: int) -> int:
        """The depth to run the next iteration of a batch of ``batch_size`` requests with."""
        bucket = self._bucket(batch_size)
        if bucket.steps == 0 and len(self.candidates) > 1:
            bucket.since_probe += 1
            if bucket.since_probe >= self.probe_interval:
                bucket.since_probe = 0
                return min(s for s in self.candidates if s > 0)
        return bucket.steps

    def observe(self, batch_size: int, steps: int, accept_length: float, seconds: float) -> None:
        """Record one iteration: its depth, mean accept length over the batch, wall time."""
        bucket = self._bucket(batch_size)
        bucket.iterations += 1
        alpha = infer_acceptance_rate(accept_length, steps)
        if alpha is not None:
            bucket.alpha = self.ema * bucket.alpha + (1 - self.ema) * alpha
        previous = bucket.times.get(steps)
        bucket.times[steps] = (
            seconds if previous is None else self.ema * previous + (1 - self.ema) * seconds
        )
        if bucket.iterations >= self.warmup_iterations:
            self._reconsider(bucket)

    def predicted_throughput(self, batch_size: int, steps: int) -> float | None:
        """Expected tokens per second per request at ``steps``; ``None`` if no timing yet."""
        bucket = self._bucket(batch_size)
        seconds = self._predicted_time(bucket, steps)
        if seconds is None or seconds <= 0:
            return None
        return expected_accept_length(bucket.alpha, steps) / seconds

    def _predicted_time(self, bucket: _Bucket, steps: int) -> float | None:
        if steps in bucket.times:
            return bucket.times[steps]
        seen = sorted(bucket.times.items())
        if not seen:
            return None
        if len(seen) == 1:
            (s0, t0), = seen
            # One point: assume a draft step costs a quarter of the rest of the iteration.
            per_step = t0 / (4 + s0)
            return t0 + (steps - s0) * per_step
        (s0, t0), (s1, t1) = seen[0], seen[-1]
        per_step = max((t1 - t0) / (s1 - s0), 0.0)
        return max(t0 + (steps - s0) * per_step, 1e-9)

    def _reconsider(self, bucket: _Bucket) -> None:
        scores = {}
        for steps in self.candidates:
            seconds = self._predicted_time(bucket, steps)
            if seconds is not None and seconds > 0:
                scores[steps] = expected_accept_length(bucket.alpha, steps) / seconds
        if bucket.steps not in scores:
            return
        best = max(scores, key=lambda s: scores[s])
        if scores[best] > scores[bucket.steps] * (1 + self.hysteresis):
            bucket.steps = best

    def snapshot(self) -> dict[int, tuple[int, float]]:
        """Per bucket: the current depth and acceptance estimate (for statistics)."""
        return {size: (b.steps, b.alpha) for size, b in sorted(self._buckets.items())}
