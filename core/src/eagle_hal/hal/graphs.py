"""Device-graph capture: what a backend supplies so the core's graph runner can capture.

What a replay sees: the device work recorded at capture, run again on the same tensors.
Values the captured code read on the host (Python ints, tuples, which tensor an attribute
pointed to) are fixed at capture. So before each replay the caller refreshes every tensor
the graph reads *in place* (``copy_``), and the attention backend's ``plan_for_replay``
does the same for its metadata; rebinding an attribute to a new tensor is never seen.
"""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

__all__ = ["DeviceGraph", "GraphCapture"]

_T = TypeVar("_T")


class DeviceGraph(abc.ABC):
    """One captured graph."""

    @abc.abstractmethod
    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay the captured work. ``host_updates`` carries host-side values that the
        device's graph API needs refreshed on replay (NPU graphs take sequence lengths this
        way); backends whose graphs read everything from device buffers ignore it."""


class GraphCapture(abc.ABC):
    """Creates graphs and the context they are captured in; one memory pool is shared."""

    @abc.abstractmethod
    def new_graph(self) -> DeviceGraph:
        """An empty graph to capture into."""

    @abc.abstractmethod
    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[None]:
        """Context manager: device work queued inside it is recorded into ``graph``."""

    def record(self, graph: DeviceGraph, body: Callable[[], _T]) -> _T:
        """Capture ``body()`` into ``graph`` and return what it returned: the static
        outputs each replay overwrites. The core captures through this method; the default
        runs ``body`` inside ``capture(graph)``."""
        with self.capture(graph):
            return body()

    def warmup(self) -> contextlib.AbstractContextManager[None]:
        """Context for the eager warm-up run before capture (a side stream on most devices)."""
        return _null_context()


@contextlib.contextmanager
def _null_context() -> Iterator[None]:
    yield
