"""A stand-in for the adaptive controller with a fixed schedule of depths.

The real controller (``speculative.adaptive``) chooses each iteration's depth from measured wall
times, so no two runs switch at the same iterations. Tests that must exercise switches
deterministically (chains broken and restarted, catch-ups after S = 0) put this in the
worker's ``controller`` instead: one depth per decode call, cycling through ``schedule``,
and every observation recorded.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["ScriptedController"]


class ScriptedController:
    """The controller's interface (``choose``, ``observe``, ``is_settled``,
    ``bucket_sizes``) over a fixed cycle of depths."""

    bucket_sizes = (1, 2, 4, 8, 16, 32, 64)

    def __init__(self, schedule: Sequence[int]) -> None:
        if not schedule or any(s < 0 for s in schedule):
            raise ValueError("a schedule is a non-empty sequence of depths S >= 0")
        self.schedule = tuple(schedule)
        self.calls = 0
        # (steps, mean accept length, seconds, catch-up seconds) per observation
        self.observed: list[tuple[int, float, float, float]] = []

    def choose(self, batch_size: int) -> int:
        steps = self.schedule[self.calls % len(self.schedule)]
        self.calls += 1
        return steps

    def observe(self, batch_size: int, steps: int, accept_length: float, seconds: float,
                catch_up_seconds: float = 0.0) -> None:
        self.observed.append((steps, accept_length, seconds, catch_up_seconds))

    def is_settled(self, batch_size: int) -> bool:
        return True
