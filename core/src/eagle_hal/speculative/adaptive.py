"""Adaptive speculation depth: pick S per batch-size bucket by measured throughput.

Per batch-size bucket and candidate depth S the controller keeps a moving average of the
mean accept length and of the wall time of one iteration at S (a running mean over the
first samples, then an exponential one). Throughput at S is ``accept(S) / time(S)``,
tokens per request per second, measured rather than predicted: a tree's acceptance is
not the chain formula's, and the cost of drafting depends on the batch.

* Memory: the time forgets quickly (``ema``; a probe's samples outweigh older ones), the
  accept length slowly: over ``accept_memory`` request-iterations (1,024: 1,024
  iterations at batch 1, 16 at batch 64). At batch 1 one iteration's accept length is
  anything from 1 to S + 1 and each prompt has its own acceptance, so an accept length
  resting on a few iterations of one prompt is noise: a controller with a short memory
  rates S = 5 below S = 0 at batch 1 and runs S = 0, 1.06x plain decoding on an H200,
  where a fixed S = 5 tree runs 1.21x (``eagle-hal bench --device cuda:0 --num-prompts 10
  --modes plain,tree``; ``tests/core/speculative/test_adaptive_convergence.py`` simulates the
  case). A collapse is still seen at once: when the recent accept
  length (``ema``, at least ``regime_samples`` samples) leaves the band ``regime_ratio``
  ... ``1 / regime_ratio`` times the long one, the long one restarts from the recent one.
  Prompts of different acceptance move a depth's accept length by well under 3x; a draft
  that stops matching the target moves it more (5.5 to 1.0 at S = 5).

* Warm-up: the first bucket runs every candidate, deepest first, for ``warmup_iterations``
  (8) timed iterations each (after one untimed settling iteration that absorbs graph capture
  and similar one-off costs), then settles on the depth with the best throughput. A later
  bucket starts at its nearest settled neighbour's depth and learns its own by probing
  (batches pass through many sizes as requests finish).
* Seeded buckets: a bucket started at its neighbour's depth first probes, after
  ``warmup_iterations + 1`` iterations there, the depth that tells whether speculation
  pays at its batch size: S = 0 when it was seeded at S > 0, else the neighbour's best
  measured S > 0 (one probe per bucket, so not held to ``probe_budget``). Its later
  probes come every ``probe_interval`` as below. In the round robin alone S = 0's turn
  came third, 448 iterations in at the earliest, which a bucket that lives a few hundred
  iterations never reaches (the H200's batch 16 ran its seeded S = 3 for all of its 746
  iterations, at 0.90x plain decoding).
* Probes: every ``probe_interval`` iterations it runs another depth (round robin) for
  ``probe_iterations`` iterations, and moves there when it beats the settled depth by the
  ``hysteresis`` margin (no margin for S = 0). So a bucket at S > 0 can fall back to 0 and
  one at 0 notices when speculation pays again. A probe that changes nothing doubles the
  interval (up to ``max_probe_interval``), and stretches it further when the probe's cost
  (its extra time over the settled depth, plus the draft's catch-up after a stretch at
  S = 0) would exceed ``probe_budget`` of the time between probes; a switch resets it.
  The first probe after the warm-up keeps within the budget too, by the times the warm-up
  measured (its draft steps only: the catch-up it may pay is not known yet).
  The catch-up is charged to the probe, not to the depth's steady-state time: it is paid
  once per return to S > 0.
* Outliers: an iteration over ``outlier`` times its depth's estimate (a compile, a
  capture) is left out, up to ``max_rejected`` in a row.
* Between probes, a settled S > 0 that measures slower than S = 0 did drops to 0 at once:
  a bucket never stays at a depth measured slower than plain decoding. The other way,
  a depth S > 0 rated above the settled one by the margin on older samples (both its
  accept lengths agreeing) is re-measured within ``warmup_iterations + 1`` iterations,
  not at the next round-robin probe (a recheck, ``_rival``): on the H200 a tail bucket
  sat at S = 0 rated 888 next to S = 3 at 1,285 until its run ended.
  The iteration that follows a stretch at S = 0 carries the draft's catch-up, so a probe
  is charged what it really costs.
"""

from __future__ import annotations

from eagle_hal.speculative.adaptive_stats import Bucket, DepthStats

__all__ = ["AdaptiveController"]


class AdaptiveController:
    """Chooses the number of draft steps per batch-size bucket from measured throughput."""

    def __init__(
        self,
        candidates: tuple[int, ...],
        *,
        ema: float = 0.9,
        hysteresis: float = 0.05,
        buckets: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128, 256),
        warmup_iterations: int = 8,
        probe_interval: int = 64,
        max_probe_interval: int = 256,
        probe_iterations: int = 2,
        probe_budget: float = 0.02,
        outlier: float = 4.0,
        max_rejected: int = 2,
        accept_memory: int = 1024,
        regime_ratio: float = 0.3,
        regime_samples: int = 8,
        max_switch_log: int = 10_000,
    ) -> None:
        if not candidates or any(s < 0 for s in candidates):
            raise ValueError("the adaptive controller needs candidate depths S >= 0")
        if not 0.0 < ema < 1.0:
            raise ValueError(f"ema must lie in (0, 1), got {ema}")
        if accept_memory < 1 or not 0.0 < regime_ratio < 1.0 or regime_samples < 1:
            raise ValueError("accept_memory and regime_samples must be >= 1, "
                             "regime_ratio in (0, 1)")
        if warmup_iterations < 1 or probe_interval < 1 or probe_iterations < 1:
            raise ValueError("warmup_iterations, probe_interval and probe_iterations must be >= 1")
        self.candidates = tuple(sorted(set(candidates)))
        self.ema = ema
        self.hysteresis = hysteresis
        self.bucket_sizes = buckets
        self.warmup_iterations = warmup_iterations
        self.probe_interval = probe_interval
        self.max_probe_interval = max(max_probe_interval, probe_interval)
        self.probe_iterations = probe_iterations
        self.probe_budget = probe_budget
        self.outlier = outlier
        self.max_rejected = max_rejected
        self.accept_memory = accept_memory
        self.regime_ratio, self.regime_samples = regime_ratio, regime_samples
        self.max_switch_log = max_switch_log
        self._buckets: dict[int, Bucket] = {}
        # every change of a bucket's settled depth, oldest first (``switches``)
        self.switch_log: list[dict] = []

    def bucket_of(self, batch_size: int) -> int:
        for size in self.bucket_sizes:
            if batch_size <= size:
                return size
        return self.bucket_sizes[-1]

    def _bucket(self, batch_size: int) -> Bucket:
        key = self.bucket_of(batch_size)
        if key not in self._buckets:
            bucket = self._new_bucket(key)
            bucket.accept_memory = max(self.accept_memory / key, 1.0 / (1.0 - self.ema))
            bucket.size = key
            self._buckets[key] = bucket
        return self._buckets[key]

    def _new_bucket(self, key: int) -> Bucket:
        stats = {s: DepthStats() for s in self.candidates}
        if len(self.candidates) == 1:
            return Bucket(stats, [], self.candidates[0], self.probe_interval)
        neighbours = sorted((abs(size.bit_length() - key.bit_length()), size)
                            for size, b in self._buckets.items() if b.settled is not None)
        if neighbours:
            # batches pass through many sizes as requests finish: a new bucket starts at
            # its nearest settled neighbour's depth and learns by probing, rather than
            # paying a full warm-up (and graph captures) at depths the neighbour found slow
            neighbour = self._buckets[neighbours[0][1]]
            bucket = Bucket(stats, [], neighbour.settled, self.probe_interval)
            bucket.first_probe = self._first_probe_of_seeded(neighbour)
            if bucket.first_probe is not None:
                bucket.probe_interval = min(self.warmup_iterations + 1, self.probe_interval)
            return bucket
        # the first bucket: every depth, deepest first (the draft is caught up after
        # prefill, so no warm-up iteration pays a catch-up that the steady state would not)
        plan = [s for s in reversed(self.candidates) for _ in range(self.warmup_iterations + 1)]
        return Bucket(stats, plan, None, self.probe_interval)

    def choose(self, batch_size: int) -> int:
        """The depth to run the next iteration of a batch of ``batch_size`` requests with
        (no side effects: the schedule advances in ``observe``)."""
        bucket = self._bucket(batch_size)
        if bucket.plan:
            return bucket.plan[0]
        assert bucket.settled is not None
        return bucket.settled

    def settled(self, batch_size: int) -> int | None:
        """The depth the bucket has settled on; ``None`` while it is warming up."""
        return self._bucket(batch_size).settled

    def is_settled(self, batch_size: int) -> bool:
        """Whether the bucket of ``batch_size`` exists and has settled (opens no bucket)."""
        bucket = self._buckets.get(self.bucket_of(batch_size))
        return bucket is not None and bucket.settled is not None

    def observe(
        self,
        batch_size: int,
        steps: int,
        accept_length: float,
        seconds: float,
        catch_up_seconds: float = 0.0,
    ) -> None:
        """Record one iteration: its depth, mean accept length over the batch, wall time,
        and the part of it the draft's catch-up took (charged to the probe running)."""
        bucket = self._bucket(batch_size)
        stats = bucket.stats.get(steps)
        if stats is None:  # a depth the controller did not offer (forced from outside)
            return
        bucket.iterations += 1
        settled_before, recheck = bucket.settled, bucket.recheck
        self._observe(bucket, steps, accept_length, seconds, catch_up_seconds)
        if bucket.settled != settled_before:
            self._log_switch(batch_size, bucket, settled_before, steps, recheck)

    def _observe(self, bucket: Bucket, steps: int, accept_length: float, seconds: float,
                 catch_up_seconds: float) -> None:
        stats = bucket.stats[steps]
        stats.seen += 1
        steady = max(seconds - catch_up_seconds, 0.0)
        timed = bucket.settled is not None or stats.seen > 1  # warm-up's first settles in
        rejected = timed and self._is_outlier(bucket, steps, steady)
        if rejected:
            stats.rejected += 1
            timed = False
        if timed:
            stats.rejected = 0
            stats.samples += 1
            weight = max(1.0 - self.ema, 1.0 / stats.samples)
            stats.accept += weight * (accept_length - stats.accept)
            stats.seconds += weight * (steady - stats.seconds)
            stats.long_samples += 1
            stats.accept_long += max(1.0 / bucket.accept_memory, 1.0 / stats.long_samples) * (
                accept_length - stats.accept_long)
            if stats.samples >= self.regime_samples and not (
                    self.regime_ratio * stats.accept_long <= stats.accept
                    <= stats.accept_long / self.regime_ratio):
                stats.accept_long, stats.long_samples = stats.accept, stats.samples
        if bucket.settled is not None and steps != bucket.settled:
            bucket.probe_cost += seconds - bucket.stats[bucket.settled].seconds
        elif catch_up_seconds > 0:  # back at the settled depth: the probe's catch-up
            bucket.probe_cost += catch_up_seconds
        if bucket.plan and bucket.plan[0] == steps and not rejected:
            # (a planned iteration left out runs again: a probe or warm-up decides on at
            # least one sample of its own; ``max_rejected`` bounds the repeats)
            bucket.plan.pop(0)
            if bucket.plan:
                return
            if bucket.settled is None:  # warm-up done: take the best outright
                bucket.settled = self._best(bucket)
                bucket.probe_interval = self._first_probe_interval(bucket)
                return
            self._after_probe(bucket, steps)
            return
        if steps != bucket.settled:
            return
        if self._slower_than_plain(bucket):
            bucket.settled, bucket.since_probe = 0, 0
            bucket.probe_interval = self.probe_interval
            return
        bucket.since_probe += 1
        bucket.since_recheck += 1
        rival = self._rival(bucket) if bucket.since_recheck > self.warmup_iterations else None
        if rival is not None:
            # rated above the settled depth by the margin, on samples from before: measure
            # it afresh now rather than at the next round-robin probe, hundreds of
            # iterations on, which a bucket in a shrinking batch's tail never reaches
            bucket.since_recheck, bucket.recheck = 0, True
            bucket.stats[rival].samples = 0  # its probe's samples alone rate it
            bucket.plan = [rival] * self.probe_iterations
            return
        if bucket.since_probe >= bucket.probe_interval and len(self.candidates) > 1:
            bucket.since_probe = 0
            probe = self._next_probe(bucket)
            # the probe's samples outweigh older ones: conditions may have changed since
            bucket.stats[probe].samples = min(bucket.stats[probe].samples, 6)
            bucket.plan = [probe] * self.probe_iterations

    def _log_switch(self, batch_size: int, bucket: Bucket, before: int | None,
                    observed: int, recheck: bool) -> None:
        """Note a change of ``bucket``'s settled depth (``switches``), with what decided
        it: the end of the warm-up, a probe of ``observed`` (a recheck: ``_rival``'s), or
        the settled depth measuring slower than S = 0 did."""
        if len(self.switch_log) >= self.max_switch_log:
            return
        reason = ("warm-up" if before is None else
                  "slower than S = 0" if observed != bucket.settled else
                  "recheck" if recheck else "probe")
        self.switch_log.append({
            "bucket": bucket.size, "batch_size": batch_size,
            "iteration": bucket.iterations, "from": before, "to": bucket.settled,
            "reason": reason,
            "tokens_per_request_s": {s: st.throughput for s, st in bucket.stats.items()},
        })

    def switches(self, since: int = 0) -> list[dict]:
        """The changes of settled depth from the ``since``-th on (at most
        ``max_switch_log`` are kept): per change its bucket, the batch size and the
        bucket's iteration count when it came, the depths before and after (``None``
        before: the warm-up), the reason (``warm-up``, ``probe``, ``recheck``, ``slower
        than S = 0``) and every depth's throughput estimate then."""
        return self.switch_log[since:]

    def _is_outlier(self, bucket: Bucket, steps: int, seconds: float) -> bool:
        """Whether an iteration of ``seconds`` at depth ``steps`` is a one-off to leave
        out: over ``outlier`` times the depth's estimate, at most ``max_rejected`` times
        in a row (after that conditions have changed). Before the depth's first sample in
        this bucket the reference is the slowest other depth's estimate here, else (a
        bucket seeded from a neighbour starts with none) the depth's estimate in the other
        buckets, scaled up by the ratio of batch sizes where theirs is smaller (an upper
        bound: an iteration costs at most proportionally more at a larger batch). One
        such sample (a compile, a capture, a page fault) among a depth's first few would
        set its estimate for hundreds of iterations: on the H200 one 39 ms sample made
        S = 0 look 20x slower than plain decoding at batch 16, and kept it from being
        probed again within the run."""
        key = bucket.size
        stats = bucket.stats[steps]
        if stats.rejected >= self.max_rejected:
            return False
        if stats.samples:
            reference = stats.seconds
        else:
            others = [st.seconds for st in bucket.stats.values() if st.samples]
            if not others:
                others = [
                    b.stats[steps].seconds * max(1.0, key / size)
                    for size, b in self._buckets.items()
                    if size != key and steps in b.stats and b.stats[steps].samples
                ]
            reference = max(others, default=0.0)
        return reference > 0 and seconds > self.outlier * reference

    def _best(self, bucket: Bucket) -> int:
        rated = {s: st.throughput for s, st in bucket.stats.items() if st.throughput is not None}
        if not rated:
            return self.candidates[0]
        return max(rated, key=lambda s: (rated[s], -s))  # ties: the shallower depth

    def _first_probe_of_seeded(self, neighbour: Bucket) -> int | None:
        """The depth a bucket seeded from ``neighbour`` probes first: S = 0 when seeded at
        S > 0, else the neighbour's best measured S > 0 (``None`` where there is no such
        depth, and the round robin starts at once)."""
        if neighbour.settled != 0:
            return 0 if 0 in self.candidates else None
        rated = {s: st.throughput for s, st in neighbour.stats.items()
                 if s > 0 and st.throughput is not None}
        if not rated:
            return None
        return max(rated, key=lambda s: (rated[s], -s))  # ties: the shallower depth

    def _slower_than_plain(self, bucket: Bucket) -> bool:
        """Whether the settled depth now measures slower than S = 0 did (no margin)."""
        if bucket.settled == 0 or 0 not in bucket.stats:
            return False
        current, plain = bucket.stats[bucket.settled].throughput, bucket.stats[0].throughput
        return current is not None and plain is not None and current < plain

    def _rival(self, bucket: Bucket) -> int | None:
        """The depth S > 0 rated highest (``cautious_throughput``) above the settled depth
        by the ``hysteresis`` margin, if any (S = 0 above a settled S > 0 is
        ``_slower_than_plain``'s). Its rating rests on samples from before, when the batch
        or the prompts differed."""
        assert bucket.settled is not None
        current = bucket.stats[bucket.settled].throughput
        if current is None:
            return None
        rated = {s: st.cautious_throughput for s, st in bucket.stats.items()
                 if s > 0 and s != bucket.settled and st.cautious_throughput is not None}
        best = max(rated, key=lambda s: (rated[s], -s), default=None)
        if best is None or rated[best] <= current * (1 + self.hysteresis):
            return None
        return best

    def _after_probe(self, bucket: Bucket, probed: int) -> None:
        """Move to the probed depth if it beats the settled one by the margin (none when it
        is S = 0); a probe that changes nothing doubles the interval to the next one (at
        least ``probe_interval``: a seeded bucket's early first probe sets no pace)."""
        assert bucket.settled is not None
        current = bucket.stats[bucket.settled].throughput
        stats = bucket.stats[probed]
        rate = stats.cautious_throughput if bucket.recheck else stats.throughput
        margin = 0.0 if probed == 0 else self.hysteresis
        if rate is not None and (current is None or rate > current * (1 + margin)):
            bucket.settled = probed
            bucket.probe_interval = self.probe_interval
        elif not bucket.recheck:  # (a recheck is no round-robin probe: it sets no pace)
            interval = max(2 * bucket.probe_interval, self.probe_interval)
            interval = min(interval, self.max_probe_interval)
            bucket.probe_interval = self._within_budget(bucket, interval, bucket.probe_cost)
        bucket.probe_cost, bucket.recheck = 0.0, False

    def _first_probe_interval(self, bucket: Bucket) -> int:
        """The interval to the first probe after the warm-up, which measured every depth:
        long enough that the probe's expected extra time keeps within ``probe_budget``."""
        assert bucket.settled is not None
        others = [s for s in self.candidates if s != bucket.settled]
        probe = others[(bucket.probes + 1) % len(others)]  # the one ``_next_probe`` gives
        extra = bucket.stats[probe].seconds - bucket.stats[bucket.settled].seconds
        return self._within_budget(bucket, self.probe_interval, self.probe_iterations * extra)

    def _within_budget(self, bucket: Bucket, interval: int, probe_cost: float) -> int:
        """``interval`` stretched so that a probe costing ``probe_cost`` seconds beyond
        the settled depth keeps within ``probe_budget`` of the time between probes."""
        assert bucket.settled is not None
        settled_seconds = bucket.stats[bucket.settled].seconds
        if settled_seconds <= 0 or probe_cost <= 0:
            return interval
        affordable = probe_cost / (self.probe_budget * settled_seconds)
        return max(interval, min(int(affordable) + 1, 16 * self.max_probe_interval))

    def _next_probe(self, bucket: Bucket) -> int:
        """The next other depth to probe: a seeded bucket's first probe, then round robin
        over the candidates."""
        others = [s for s in self.candidates if s != bucket.settled]
        first, bucket.first_probe = bucket.first_probe, None
        if first in others:  # (not where the bucket has since moved to it)
            return first
        bucket.probes += 1
        return others[bucket.probes % len(others)]

    def snapshot(self) -> dict[int, tuple[int | None, dict[int, float | None]]]:
        """Per bucket: the settled depth and the measured throughput of each depth."""
        return {
            size: (b.settled, {s: st.throughput for s, st in b.stats.items()})
            for size, b in sorted(self._buckets.items())
        }
