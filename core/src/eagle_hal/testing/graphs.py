"""A strict emulated device graph for testing capture and replay without a device.

``EmulatedGraphCapture.record(graph, body)`` keeps ``body`` together with a snapshot of
the Python objects it closed over: closures, dataclasses (``ForwardBatch``, attention
metadata), containers and attention backends are copied, field by field, down to the
tensors, which are kept as the very same objects. ``replay()`` re-runs the snapshot and
copies its results into the outputs ``record`` returned. So, as on a real device:

* a tensor updated in place before the replay is seen;
* an attribute rebound to a new tensor, a fresh tensor allocated in ``plan_for_replay``,
  or a host value (``prefix_lens_cpu``, an int in the metadata) changed after capture is
  not: the replay reads what the capture read;
* the outputs hold NaN (floating) or -1 (integer) until the first replay;
* graphs of one capture share a memory pool: outputs allocated inside a capture (not
  reachable from the body before it runs) may be the freed intermediates of a graph
  recorded earlier, so every replay of that earlier graph poisons them (NaN, the largest
  integer, True). Outputs must be read before another graph replays, or preallocated.

Unlike a device graph, the body runs once at capture too (its side effects, such as KV
writes, happen then). Objects of other types (models, runners, KV stores) are shared,
not snapshotted. ``host_updates`` passed to ``replay`` are ignored.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import types
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import torch

from eagle_hal.hal.attention import AttentionBackend
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture

__all__ = [
    "EmulatedGraph", "EmulatedGraphCapture", "recording_graph_module", "replaying_cpu_backend",
    "snapshot",
]

_T = TypeVar("_T")


def snapshot(obj: Any, memo: dict[int, Any] | None = None,
             found: set[int] | None = None) -> Any:
    """``obj`` with its closures, dataclasses, containers and attention backends copied
    recursively and every tensor (and any other object) kept as is; aliasing is kept."""
    memo = {} if memo is None else memo
    key = id(obj)
    if key in memo:
        return memo[key]
    if isinstance(obj, torch.Tensor) and found is not None:
        found.add(key)  # a tensor the body reaches: allocated before its capture
    if isinstance(obj, (torch.Tensor, type)):
        return obj
    if isinstance(obj, types.FunctionType):
        if not obj.__closure__:
            return obj
        memo[key] = obj  # a closure reaching itself keeps the original
        cells = tuple(_snapshot_cell(cell, memo, found) for cell in obj.__closure__)
        clone = types.FunctionType(
            obj.__code__, obj.__globals__, obj.__name__, obj.__defaults__, cells
        )
        clone.__kwdefaults__ = obj.__kwdefaults__
        memo[key] = clone
        return clone
    if isinstance(obj, types.MethodType):
        return types.MethodType(
            snapshot(obj.__func__, memo, found), snapshot(obj.__self__, memo, found)
        )
    if isinstance(obj, tuple):
        items = [snapshot(item, memo, found) for item in obj]
        return type(obj)(*items) if hasattr(obj, "_fields") else tuple(items)
    if isinstance(obj, list):
        clone_list: list[Any] = []
        memo[key] = clone_list
        clone_list.extend(snapshot(item, memo, found) for item in obj)
        return clone_list
    if isinstance(obj, dict):
        clone_dict: dict[Any, Any] = {}
        memo[key] = clone_dict
        clone_dict.update((k, snapshot(v, memo, found)) for k, v in obj.items())
        return clone_dict
    if dataclasses.is_dataclass(obj):
        clone = copy.copy(obj)
        memo[key] = clone
        for field in dataclasses.fields(obj):
            object.__setattr__(clone, field.name, snapshot(getattr(obj, field.name), memo, found))
        return clone
    if isinstance(obj, AttentionBackend):
        clone = copy.copy(obj)
        memo[key] = clone
        for name, value in vars(obj).items():
            setattr(clone, name, snapshot(value, memo, found))
        return clone
    return obj


def _snapshot_cell(cell: types.CellType, memo: dict[int, Any],
                   found: set[int] | None = None) -> types.CellType:
    try:
        contents = cell.cell_contents
    except ValueError:  # a free variable not bound yet
        return types.CellType()
    return types.CellType(snapshot(contents, memo, found))


def _tensors(result: Any) -> tuple[torch.Tensor, ...]:
    """The output tensors of a captured body: a tensor or a (nested) tuple/list of them."""
    if isinstance(result, torch.Tensor):
        return (result,)
    if isinstance(result, (tuple, list)):
        return tuple(t for item in result for t in _tensors(item))
    raise TypeError(f"a captured body must return tensors, got {type(result).__name__}")


def _poison(tensor: torch.Tensor) -> None:
    """Fill ``tensor`` with what reused memory may hold: NaN, or an integer no index fits."""
    if tensor.is_floating_point():
        tensor.fill_(float("nan"))
    elif tensor.dtype == torch.bool:
        tensor.fill_(True)
    else:
        tensor.fill_(torch.iinfo(tensor.dtype).max)


class EmulatedGraph(DeviceGraph):
    """The snapshot of one recorded body and its static outputs."""

    def __init__(self) -> None:
        self.body: Callable[[], Any] | None = None
        self.outputs: tuple[torch.Tensor, ...] = ()
        self.pool_outputs: tuple[torch.Tensor, ...] = ()  # outputs allocated in the capture
        self.later: list[EmulatedGraph] = []  # graphs of the same capture recorded after it
        self.replays = 0

    def replay(self, host_updates: dict[str, Any] | None = None) -> None:
        """Re-run the snapshot and copy its results into the static outputs. Raises
        ``RuntimeError`` before a capture, ``ValueError`` if a result changed shape."""
        if self.body is None:
            raise RuntimeError("replay of a graph that was never captured")
        fresh = _tensors(self.body())
        for index, (static, value) in enumerate(zip(self.outputs, fresh, strict=True)):
            if static.shape != value.shape:
                raise ValueError(
                    f"output {index} of the replay has shape {tuple(value.shape)}, captured "
                    f"{tuple(static.shape)}"
                )
            static.copy_(value)
        self.replays += 1
        # The shared pool: this graph's intermediates may sit where a later capture put its
        # outputs, so its replay leaves those garbage (outputs read right after their own
        # replay are unaffected; outputs kept across another graph's replay are not).
        for graph in self.later:
            for output in graph.pool_outputs:
                _poison(output)


class EmulatedGraphCapture(GraphCapture):
    """Graphs that replay a snapshot of the captured body; see the module docstring.

    Only ``record`` captures: a bare ``capture(graph)`` block cannot be replayed, so it
    raises ``TypeError``.
    """

    def __init__(self) -> None:
        self._recorded: list[EmulatedGraph] = []

    def new_graph(self) -> EmulatedGraph:
        return EmulatedGraph()

    def capture(self, graph: DeviceGraph) -> contextlib.AbstractContextManager[None]:
        raise TypeError("EmulatedGraphCapture records callables only: use record(graph, body)")

    def record(self, graph: DeviceGraph, body: Callable[[], _T]) -> _T:
        """Snapshot ``body``, run it once for its outputs, then blank them (NaN / -1)."""
        if not isinstance(graph, EmulatedGraph):
            raise TypeError(f"expected a graph from new_graph(), got {type(graph).__name__}")
        found: set[int] = set()
        frozen = snapshot(body, found=found)
        result = frozen()
        graph.body, graph.outputs = frozen, _tensors(result)
        graph.pool_outputs = tuple(t for t in graph.outputs if id(t) not in found)
        for output in graph.outputs:
            output.fill_(float("nan") if output.is_floating_point() else -1)
        for earlier in getattr(self, "_recorded", []):
            earlier.later.append(graph)
        if hasattr(self, "_recorded"):
            self._recorded.append(graph)
        return result

    @contextlib.contextmanager
    def warmup(self) -> Iterator[None]:
        yield


def recording_graph_module(graph_class: str, with_graphs: bool = True) -> types.SimpleNamespace:
    """A stand-in for a device module with the CUDA-graph API shape (``ModuleGraphCapture``'s
    contract) that records what is called in ``.log``: ``("wait", waiter, waited)``,
    ``("stream", name)``, ``("capture", graph, pool)``, ``("replay", graph)``. Streams are
    named "current" and "side"; the pool is the string "pool". ``with_graphs=False`` leaves
    out the graph API (graph class, ``graph``, ``graph_pool_handle``)."""
    log: list[tuple[Any, ...]] = []

    class Stream:
        def __init__(self, name: str) -> None:
            self.name = name

        def wait_stream(self, other: Stream) -> None:
            log.append(("wait", self.name, other.name))

    class Graph:
        def replay(self) -> None:
            log.append(("replay", self))

    @contextlib.contextmanager
    def graph(g: Graph, pool: Any = None) -> Iterator[None]:
        log.append(("capture", g, pool))
        yield

    @contextlib.contextmanager
    def stream(s: Stream) -> Iterator[None]:
        log.append(("stream", s.name))
        yield

    current = Stream("current")
    module = types.SimpleNamespace(log=log, stream=stream, Stream=lambda: Stream("side"),
                                   current_stream=lambda: current)
    if with_graphs:
        setattr(module, graph_class, Graph)
        module.graph, module.graph_pool_handle = graph, lambda: "pool"
    return module


def replaying_cpu_backend() -> Any:
    """The CPU backend (reference attention and ops) with its graphs served by
    ``EmulatedGraphCapture``: device-graph code paths without a device."""
    from eagle_hal.backends.cpu.backend import CpuBackend
    from eagle_hal.registry import select_backend

    class ReplayingCpuBackend(CpuBackend):
        def graph_capture(self) -> GraphCapture:
            return EmulatedGraphCapture()

    reference = select_backend("cpu")
    return ReplayingCpuBackend(reference.descriptor, reference.device_spec)
