"""What the worker tells the adaptive controller: one report per iteration it can time.

The controller (``speculative.adaptive``) rates a depth by tokens per request per second, so each
report must carry the tokens a depth delivered and the wall time they cost. With one
iteration in flight (``speculative.overlap``, ``speculative.speculative_overlap``) a call's
tokens are
the previous iteration's, and some calls deliver nothing (a chain's first launch) or
deliver an iteration outside the steady state (a chain read back when the batch or the
depth changes). The bookkeeping here keeps every second and every token on the right
account:

* the clock runs from the end of the previous decode call (so the engine's work on the
  tokens between calls, which grows with the accept length, and the device's work on an
  iteration in flight meanwhile are counted); a prefill's own time is left out: the
  worker first lets the iteration in flight finish and charges that wait (and the
  engine's work before it) to the depth (``absorb``), and the clock restarts at the
  prefill's end;
* calls that report nothing after a batch change (the chain read back for the requests
  still running, the new chain's first launch) are the depth's own cost: their time and
  the read-back's tokens go into the depth's next report;
* calls between a change of depth and the first report at the new depth (the old chain's
  read-back, the new chain's first launch, the draft's catch-up) are the switch's cost:
  they go into that report as its ``catch_up_seconds``, which the controller charges to
  the probe rather than to the depth's steady state; what the old depth left unreported
  becomes switch cost too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["ControllerReports"]


class ControllerReports:
    """The accounts between two reports to the controller (see the module docstring)."""

    def __init__(self) -> None:
        self.last_end: float | None = None  # when the last decode call ended
        self.previous_steps: int | None = None  # the depth the last call ran at
        self.unreported = 0.0  # seconds of the depth's own calls that reported nothing
        self.unreported_accept = 0.0  # tokens per request read back in them
        self.switch_seconds = 0.0  # seconds since a change of depth
        self.catch_up = 0.0  # seconds of a catch-up run before a chain's first launch
        self.in_switch = False
        self.reported = False  # whether the call under way has reported

    def absorb(self, now: float) -> None:
        """A prefill is about to run with an iteration in flight, which the device has
        finished by ``now`` (the worker synchronised): the time since the last call's end
        is the depth's (the switch's, during one), as the next call's would have been.
        Without this the prefill's read-back absorbed the iteration's device time and the
        next call reported the iteration's tokens for a read-back that no longer waited:
        a depth's rate came out too high, and the more so the longer its iterations and
        the more often requests join (at batch 16-64 a prefill every few calls)."""
        if self.last_end is None:
            return
        if self.in_switch:
            self.switch_seconds += now - self.last_end
        else:
            self.unreported += now - self.last_end
        self.last_end = now

    def prefill(self) -> None:
        """A prefill starts: its time is no depth's."""
        self.last_end = None

    def prefilled(self, now: float) -> None:
        """The prefill ended at ``now``: the next call's clock starts there (the engine's
        work between the prefill and that call is the depth's, as between two calls)."""
        self.last_end = now

    def begin(self, steps: int, start: float) -> float:
        """A decode call at depth ``steps`` starts at ``start``; returns when its period
        began (the previous call's end or prefill's end; ``start`` before any)."""
        if steps != self.previous_steps:
            self.in_switch = True
            self.switch_seconds += self.unreported
            self.unreported = self.unreported_accept = 0.0
        self.previous_steps = steps
        self.reported = False
        return self.last_end if self.last_end is not None else start

    def end(self, now: float, since: float, timing: bool) -> None:
        """The call ended at ``now``; unless it reported (or nothing is timed), its period
        goes to the switch's account or the depth's."""
        self.last_end = now
        if timing and not self.reported:
            if self.in_switch:
                self.switch_seconds += now - since
            else:
                self.unreported += now - since

    def read_back(self, emitted: Sequence[Sequence[int]]) -> None:
        """A chain in flight was read back outside a report: after a batch change its
        tokens are the depth's (folded into its next report); after a change of depth
        they are part of the switch."""
        if self.in_switch:
            return
        advanced = [len(e) for e in emitted if e]
        if advanced:
            self.unreported_accept += sum(advanced) / len(advanced)

    def chain_catch_up(self, seconds: float) -> None:
        """The draft caught up before a chain's first launch, taking ``seconds``."""
        self.catch_up += seconds

    def drop_chain(self) -> None:
        """The chain in flight was dropped: its catch-up will be reported by none."""
        self.catch_up = 0.0

    def overlapped_catch_up(self) -> float:
        """The catch-up seconds to name in an overlapped chain's report: they ran in the
        chain's first call, whose time the report carries already; after a change of
        depth that call is all switch cost, named as such (so: none here)."""
        seconds, self.catch_up = self.catch_up, 0.0
        return 0.0 if self.in_switch else seconds

    def report(self, controller: Any, batch_size: int, steps: int, accept: float,
               seconds: float, catch_up: float = 0.0) -> None:
        """Report an iteration (mean accept length over the batch, its period, the part
        of it a catch-up took) with everything the accounts hold since the last report."""
        switch = self.switch_seconds
        seconds += self.unreported + switch
        accept += self.unreported_accept
        self.unreported = self.switch_seconds = self.unreported_accept = 0.0
        self.in_switch, self.reported = False, True
        controller.observe(batch_size, steps, accept, seconds, catch_up + switch)
