"""One decode iteration: the protocol its strategies share, and what they share.

An iteration advances every request of a batch by its accepted tokens: draft a tree of S
levels (none at S = 0), verify it with one target forward, accept the longest correct path
(greedy, or lossless tree sampling), move the accepted nodes' KV into place and free the
rest, then let the draft consume the emitted tokens. Three strategies run it
(``EagleWorker`` picks one per call):

* ``EagerIteration`` (``speculative.eager``): built from what the host read back, read back
  before returning: the reference order of the steps;
* ``OverlappedPlain`` (``speculative.overlap``): plain decoding (and the adaptive mode at
  S = 0) with one iteration in flight: each call launches the next before reading back
  the previous;
* ``OverlappedSpeculative`` (``speculative.speculative_overlap``): the same at S > 0, the
  device building each iteration from the previous one's results.

Each strategy keeps its own state (what it has in flight) and reaches everything else
through an ``IterationContext``: the runner and sampling ops, the draft's per-request state
(``DraftTracker``), a ``Drafter`` that proposes trees in place of the EAGLE head (``None``:
the head, or no speculation; ``speculative.drafter``), the batch's sampling tensors, the
adaptive controller and its accounts, the phase timer and the per-depth counts.

The logit bias and the penalties (``speculative.logits_processing``) and the logprobs
(``speculative.logprobs``) run in ``EagerIteration`` only: the worker takes it for every
batch with a request that sets them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

import torch

from eagle_hal.engine.request import Request
from eagle_hal.engine.runner import ModelRunner
from eagle_hal.hal.sampling import SamplingOps
from eagle_hal.speculative.acceptance import SamplingBatch
from eagle_hal.speculative.adaptive import AdaptiveController
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.draft_tracker import DraftTracker
from eagle_hal.speculative.drafter import Drafter
from eagle_hal.speculative.logits_processing import LogitsProcessing
from eagle_hal.speculative.reports import ControllerReports

__all__ = [
    "DecodeBatch",
    "Iteration",
    "IterationContext",
    "IterationTimes",
    "Outputs",
    "PhaseTimer",
    "SamplingTensors",
]


@dataclasses.dataclass(frozen=True, slots=True)
class DecodeBatch:
    """What one decode call asks for: the running requests, the depth S the controller (or
    the fixed spec) chose, the settings at that depth for this batch's size, and the
    call's clock: when it began and when the controller's period began
    (``ControllerReports.begin``)."""

    requests: Sequence[Request]
    steps: int
    spec: SpecConfig
    start: float
    since: float

    @property
    def size(self) -> int:
        return len(self.requests)


@dataclasses.dataclass(slots=True)
class Outputs:
    """What a decode call hands back: each request's emitted tokens (``[]`` for one whose
    tokens are still in flight), and what the adaptive controller is told: ``accept`` the
    mean accept length to report over the call's period (``None``: no report, e.g. a call
    that only launched), ``catch_up`` the seconds of that period a draft catch-up took
    (charged to the probe). ``read_back``: an iteration in flight was applied outside a
    report (its tokens join the depth's accounts, ``ControllerReports.read_back``)."""

    emitted: list[list[int]]
    accept: float | None = None
    catch_up: float = 0.0
    read_back: bool = False


class Iteration(Protocol):
    """A decode strategy."""

    def decode(self, batch: DecodeBatch) -> Outputs:
        """Run one iteration for ``batch`` and return its outputs."""
        ...

    def drain(self) -> list[tuple[Request, list[int]]]:
        """Read back what is in flight without launching more: each request it advanced
        that still runs, with its tokens (``[]``: nothing in flight)."""
        ...

    def discard(self) -> None:
        """Forget what is in flight (another strategy takes over); the requests give back
        the positions it advanced or reserved."""
        ...


@dataclasses.dataclass(slots=True)
class IterationTimes:
    """Cumulative wall time per phase (host-measured around synchronising points)."""

    draft: float = 0.0
    verify: float = 0.0
    accept: float = 0.0
    draft_extend: float = 0.0
    catch_up: float = 0.0  # the draft's catch-up after a stretch at S = 0 (not in draft_extend)
    # the host's preparation: the reserve, the slots and the one upload of the iteration
    other: float = 0.0
    iterations: int = 0


class PhaseTimer:
    """Phase times of eager iterations, for the benchmark's split pass: off by default (no
    device sync is added); on, each phase ends with a device sync and its wall time goes
    to ``times``. Phases follow each other: ``begin`` starts the clock, each ``phase``
    runs to the next one's start.

        timer.begin(start)
        with timer.phase("draft"):
            ...
    """

    def __init__(self, synchronize: Callable[[], None]) -> None:
        self.synchronize = synchronize
        self.enabled = False
        self.times = IterationTimes()
        self._last = 0.0

    def begin(self, start: float) -> None:
        self._last = start

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        yield
        if self.enabled:
            self.synchronize()
            now = time.perf_counter()
            setattr(self.times, name, getattr(self.times, name) + now - self._last)
            self._last = now

    def count_iteration(self) -> None:
        if self.enabled:
            self.times.iterations += 1


class SamplingTensors:
    """The batch's sampling settings as device tensors, rebuilt only when the batch changes.

    A request samples with its own seed, or one derived from the run's base seed and its id.
    Tensor parallelism: every rank must take the same accept decisions, so all ranks derive
    from rank 0's base seed (request ids are the same on every rank and the logits are
    bit-identical after the all-gather): the counter-based noise, hence every draw, is the
    same on every rank (``eagle_hal.parallel``)."""

    def __init__(self, runner: ModelRunner, seed: int | None) -> None:
        local = seed if seed is not None else int.from_bytes(os.urandom(4), "little")
        self.device = runner.device
        self.base_seed = runner.parallel.broadcast_ints([local])[0]
        self._cache: tuple[tuple[int, ...], SamplingBatch] | None = None

    def seed_of(self, request: Request) -> int:
        if request.params.seed is not None:
            return request.params.seed
        return (self.base_seed * 1_000_003 + request.request_id) & 0x7FFF_FFFF_FFFF

    def of(self, requests: Sequence[Request]) -> SamplingBatch:
        key = tuple(r.request_id for r in requests)
        if self._cache is None or self._cache[0] != key:
            sampling = SamplingBatch.of(
                [r.params for r in requests], [self.seed_of(r) for r in requests], self.device
            )
            self._cache = (key, sampling)
        return self._cache[1]

    def forget(self) -> None:
        """A request left: the next batch builds its tensors anew."""
        self._cache = None


class IterationContext:
    """What the strategies share (see the module docstring). ``spec`` and ``controller``
    may be swapped between calls (the benchmark's warm-up runs one depth at a time);
    ``spec_at`` follows."""

    def __init__(self, runner: ModelRunner, ops: SamplingOps, spec: SpecConfig,
                 draft: DraftTracker, controller: AdaptiveController | None,
                 seed: int | None, drafter: Drafter | None = None) -> None:
        self.runner = runner
        self.ops = ops
        self.draft = draft
        self.drafter = drafter  # proposes the trees in place of the EAGLE head
        self.spec = spec
        self.controller = controller
        self.vocab_size: int = runner.target.config.vocab_size
        self.aux_layers: tuple[int, ...] = tuple(getattr(runner.draft, "aux_layers", ()) or ())
        self.sampling = SamplingTensors(runner, seed)
        # logit bias and penalties, per request (speculative.logits_processing)
        self.processing = LogitsProcessing(self.vocab_size, runner.device)
        self.reports = ControllerReports()  # the accounts between controller reports
        self.timer = PhaseTimer(runner.backend.synchronize)
        self.iterations_at_depth: Counter[int] = Counter()  # decode iterations per depth S
        self.one_node: dict[object, tuple[torch.Tensor, ...]] = {}  # single_node_tree's
        # the settings per depth, built once per ``spec``: an iteration at S = 0 should
        # cost the host no more than plain decoding does
        self._specs: tuple[SpecConfig, dict[tuple[int, int | None], SpecConfig]] = (spec, {})

    @property
    def spec(self) -> SpecConfig:
        return self._spec

    @spec.setter
    def spec(self, spec: SpecConfig) -> None:
        self._spec = spec
        self.draft.topk = spec.topk  # the draft's top-K feeds the next tree

    def spec_at(self, steps: int, batch_size: int | None = None) -> SpecConfig:
        """``spec`` at depth ``steps`` (the adaptive controller's choice) for a batch of
        ``batch_size`` (its controller bucket narrows a wide tree, ``SpecConfig.with_steps``;
        ``None``: the widest shape), built once."""
        base, specs = self._specs
        if base is not self.spec:
            base, specs = self.spec, {}
            self._specs = (base, specs)
        bucket, sizes = None, getattr(self.controller, "bucket_sizes", None)
        if batch_size is not None and sizes:  # the controller's bucket of the batch
            bucket = next((size for size in sizes if batch_size <= size), sizes[-1])
        spec = specs.get((steps, bucket))
        if spec is None:
            spec = specs[(steps, bucket)] = base.with_steps(steps, bucket)
        return spec

    @property
    def all_shapes(self) -> dict[tuple[int, int | None], SpecConfig]:
        """Every (depth, bucket) settings built so far for the current ``spec``."""
        return self._specs[1]


def still_running(requests: Sequence[Request]) -> bool:
    """Whether any of an in-flight iteration's requests still runs (holds its table row)."""
    return any(not r.finished and r.table_row is not None for r in requests)
