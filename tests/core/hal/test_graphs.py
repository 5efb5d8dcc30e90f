"""hal.graphs: merging the host updates of several forwards captured in one graph; what a
recorded graph keeps alive."""

from __future__ import annotations

import contextlib
import gc
import weakref

import pytest
import torch
from eagle_hal.hal.graphs import DeviceGraph, GraphCapture, merge_host_updates


def test_lists_concatenate_key_by_key_in_capture_order():
    """Each key's per-call entries follow capture order; forwards without updates add none."""
    first = {"lengths": [{"kv": [3]}], "only_first": [1]}
    second = {"lengths": [{"kv": [4]}, {"kv": [5]}]}
    merged = merge_host_updates([first, None, second])
    assert merged == {"lengths": [{"kv": [3]}, {"kv": [4]}, {"kv": [5]}], "only_first": [1]}
    assert first == {"lengths": [{"kv": [3]}], "only_first": [1]}  # inputs left as they were


def test_no_updates_give_none():
    """No forward with host updates: the replay gets None."""
    assert merge_host_updates([None, None]) is None and merge_host_updates([]) is None
    assert merge_host_updates([{}]) is None


def test_a_value_that_is_not_a_list_is_refused():
    """A value without per-call entries cannot be merged across forwards."""
    with pytest.raises(TypeError, match="'lengths' is a tuple"):
        merge_host_updates([{"lengths": (3,)}])


class _ForgetfulGraph(DeviceGraph):
    """Holds nothing of what it captured, like a CUDA graph object."""

    def replay(self, host_updates=None):
        pass


class _NullCapture(GraphCapture):
    def new_graph(self):
        return _ForgetfulGraph()

    def capture(self, graph):
        return contextlib.nullcontext()


def test_record_keeps_the_bodys_tensors_alive_as_long_as_the_graph():
    """A device graph replays reads of memory its body's closure owns (the chain loop's
    position offsets were such a tensor): record must keep them from being freed and
    reallocated while the graph lives, and let them go with it."""

    def make_body():
        offsets = torch.arange(4)  # referenced by the closure alone
        return (lambda: offsets * 2), weakref.ref(offsets)

    body, offsets = make_body()
    graph = _NullCapture().new_graph()
    out = _NullCapture().record(graph, body)
    assert torch.equal(out, torch.arange(4) * 2)
    del body
    gc.collect()
    assert offsets() is not None, "the graph let its body's tensor be freed"
    del graph
    gc.collect()
    assert offsets() is None


def test_no_collection_collects_first_and_then_not_at_all():
    """Captures run inside ``no_collection``: garbage cycles are freed before (a cycle made
    earlier is gone on entry), none is freed inside (a cycle made inside survives however
    many objects are allocated), and collection resumes after."""
    import gc

    from eagle_hal.hal.graphs import no_collection

    freed: list[str] = []

    class Cycle:
        def __init__(self, name):
            self.name, self.me = name, self

        def __del__(self):
            freed.append(self.name)

    Cycle("before")
    assert gc.isenabled()
    with no_collection():
        assert freed == ["before"] and not gc.isenabled()
        Cycle("inside")
        [[i] for i in range(100_000)]  # enough allocations to trigger a collection
        assert freed == ["before"]
    assert gc.isenabled()
    gc.collect()
    assert freed == ["before", "inside"]
