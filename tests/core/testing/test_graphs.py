"""The strict emulated graph: a replay sees in-place updates and nothing else.

Oracle: what a device graph does by construction — it re-runs recorded work on the
tensors it recorded; host values and rebound attributes are invisible to it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from eagle_hal.testing.graphs import EmulatedGraphCapture, snapshot


@dataclasses.dataclass
class Buffers:
    scale: torch.Tensor
    offset: int


def _captured(buffers: Buffers, x: torch.Tensor):
    capture = EmulatedGraphCapture()
    graph = capture.new_graph()
    out = capture.record(graph, lambda: x * buffers.scale + buffers.offset)
    return graph, out


def test_outputs_are_blank_until_the_first_replay():
    """After capture the static output holds NaN; the replay fills it."""
    graph, out = _captured(Buffers(torch.tensor(2.0), 0), torch.ones(3))
    assert torch.isnan(out).all()
    graph.replay()
    assert torch.equal(out, torch.full((3,), 2.0))


def test_in_place_updates_are_seen():
    """Inputs and buffers changed with copy_ between replays are read by the replay."""
    buffers, x = Buffers(torch.tensor(2.0), 0), torch.ones(3)
    graph, out = _captured(buffers, x)
    x.copy_(torch.tensor([1.0, 2.0, 3.0]))
    buffers.scale.fill_(10.0)
    graph.replay()
    assert torch.equal(out, torch.tensor([10.0, 20.0, 30.0]))


def test_rebound_attributes_and_host_values_are_not_seen():
    """A tensor attribute rebound after capture, or a changed host int, is invisible."""
    buffers, x = Buffers(torch.tensor(2.0), 1), torch.ones(3)
    graph, out = _captured(buffers, x)
    buffers.scale = torch.tensor(10.0)
    buffers.offset = 100
    graph.replay()
    assert torch.equal(out, torch.full((3,), 3.0))


def test_snapshot_keeps_tensors_and_aliasing():
    """Tensors stay the same objects; one dataclass reached twice is copied once."""
    buffers = Buffers(torch.zeros(2), 0)
    copied = snapshot({"a": buffers, "b": [buffers]})
    assert copied["a"] is copied["b"][0] and copied["a"] is not buffers
    assert copied["a"].scale is buffers.scale


def test_misuse_raises():
    """Replaying an empty graph or capturing with a bare context is refused."""
    capture = EmulatedGraphCapture()
    with pytest.raises(RuntimeError, match="never captured"):
        capture.new_graph().replay()
    with pytest.raises(TypeError, match="record"):
        capture.capture(capture.new_graph())
