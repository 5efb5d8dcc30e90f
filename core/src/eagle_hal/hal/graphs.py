"""Device-graph capture: what a backend supplies so the core's graph runner can capture.

What a replay sees: the device work recorded at capture, run again on the same tensors.
Values the captured code read on the host (Python ints, tuples, which tensor an attribute
pointed to) are fixed at capture. So before each replay the caller refreshes every tensor
the graph reads *in place* (``copy_``), and the attention backend's ``plan_for_replay``
does the same for its metadata; rebinding an attribute to a new tensor is never seen.
Host values a device's graph API can refresh itself (NPU graphs: the fused attention's
sequence lengths) come from ``AttentionBackend.replay_host_updates`` and reach the graph
through ``DeviceGraph.replay(host_updates)``.

A graph may hold several forwards (the draft's chain loop), each with its own metadata,
when the attention backend allows it (``AttentionBackend.multi_forward_graphs``). The graph
still replays once: ``merge_host_updates`` joins the forwards' host updates, in capture
order, into the one ``host_updates`` that replay takes.
"""

from __future__ import annotations

import abc
import contextlib
import gc
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

__all__ = [
    "DeviceGraph",
    "GraphCapture",
    "ModuleGraph",
    "ModuleGraphCapture",
    "merge_host_updates",
    "no_collection",
]

_T = TypeVar("_T")


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Collect Python's cyclic garbage now and none while inside. For a graph capture:
    garbage that holds device objects (an earlier engine's graphs, events, pinned buffers)
    freed during a capture calls the driver mid-capture (``cudaGraphDestroy``,
    ``cudaEventDestroy``), which invalidates it ("operation failed due to a previous error
    during capture", seen on the H200 when tests ran many engines in one process)."""
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def merge_host_updates(
    updates: Iterable[dict[str, Any] | None],
) -> dict[str, Any] | None:
    """The host updates of the forwards captured in one graph, as the one ``host_updates``
    its replay takes: ``updates`` in capture order (``replay_host_updates`` of each
    forward), each key's lists concatenated in that order; ``None`` when no forward has
    any. Raises ``TypeError`` for a value that is not a list (a backend in a graph of
    several forwards must give one entry per captured call, see ``hal.attention``)."""
    merged: dict[str, list[Any]] = {}
    for update in updates:
        for key, entries in (update or {}).items():
            if not isinstance(entries, list):
                raise TypeError(
                    f"host update {key!r} is a {type(entries).__name__}, not a list of "
                    "per-call entries; it cannot be merged across forwards"
                )
            merged.setdefault(key, []).extend(entries)
    return merged or None


class DeviceGraph(abc.ABC):
    """One captured graph.

    ``recorded`` holds what ``GraphCapture.record`` captured (the body and, through its
    closure, every tensor only the body refers to) for as long as the graph lives: a
    device graph reads those tensors' memory at every replay, so they must not be freed
    and handed out again when the capturing code drops its last reference.
    """

    recorded: Any = None

    @abc.abstractmethod
    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay the captured work. ``host_updates`` carries host-side values that the
        device's graph API needs refreshed on replay (NPU graphs take sequence lengths this
        way); the core passes what the attention backend's ``replay_host_updates`` returned
        for the replayed batch. Backends whose graphs read everything from device buffers
        get ``None`` and ignore it."""


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
        graph.recorded = body  # the body's closure owns tensors the replays read
        with self.capture(graph):
            return body()

    def warmup(self) -> contextlib.AbstractContextManager[None]:
        """Context for the eager warm-up run before capture (a side stream on most devices)."""
        return _null_context()


class ModuleGraph(DeviceGraph):
    """One graph of a device module that mirrors the CUDA-graph API; its kernels read every
    input from device buffers, so a replay takes no host-side updates."""

    label = "device"  # for messages: "HIP", "MUSA", "XPU", ...

    def __init__(self, graph: Any) -> None:
        self.graph = graph

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Replay; ``host_updates`` must be empty (refresh the static device buffers instead)."""
        if host_updates:
            raise ValueError(
                f"{self.label} graphs take no host-side updates, got {sorted(host_updates)}; "
                "refresh the static device buffers instead"
            )
        self.graph.replay()


class ModuleGraphCapture(GraphCapture):
    """Capture through a device module with the CUDA-graph API shape (``<Name>Graph()``,
    ``graph(g, pool=...)``, ``graph_pool_handle()``, ``Stream``): one shared memory pool,
    warm-up on a side stream as capture does. A backend subclasses it naming the module's
    graph class (``graph_class``) and its ``ModuleGraph`` subclass (``graph_type``)."""

    graph_class = "Graph"
    graph_type: type[ModuleGraph] = ModuleGraph

    def __init__(self, device_module: Any) -> None:
        self.device_module = device_module
        self.pool = device_module.graph_pool_handle()
        self._side_stream: Any = None

    def new_graph(self) -> ModuleGraph:
        return self.graph_type(getattr(self.device_module, self.graph_class)())

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[Any]:
        if not isinstance(graph, self.graph_type):
            raise TypeError(
                f"expected a {self.graph_type.__name__} from new_graph(), "
                f"got {type(graph).__name__}"
            )
        return _guarded(self.device_module.graph(graph.graph, pool=self.pool))

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        """Warm up on a side stream, as capture does, so lazy initialisation is not captured."""
        if self._side_stream is None:
            self._side_stream = self.device_module.Stream()
        self._side_stream.wait_stream(self.device_module.current_stream())
        with self.device_module.stream(self._side_stream):
            yield
        self.device_module.current_stream().wait_stream(self._side_stream)


@contextlib.contextmanager
def _guarded(context: contextlib.AbstractContextManager[Any]) -> Iterator[Any]:
    with no_collection(), context as value:
        yield value


@contextlib.contextmanager
def _null_context() -> Iterator[None]:
    yield
