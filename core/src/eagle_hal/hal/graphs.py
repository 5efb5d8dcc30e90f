"""Device-graph capture: what a backend supplies so the core's graph runner can capture."""

from __future__ import annotations

import abc
import contextlib
from collections.abc import Iterator
from typing import Any

__all__ = ["DeviceGraph", "GraphCapture"]


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

    def warmup(self) -> contextlib.AbstractContextManager[None]:
        """Context for the eager warm-up run before capture (a side stream on most devices)."""
        return _null_context()


@contextlib.contextmanager
def _null_context() -> Iterator[None]:
    yield
