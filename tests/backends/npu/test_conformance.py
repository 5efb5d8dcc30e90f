"""The conformance suite's device areas through the NPU backend's classes bound to the CPU,
its attention running on the operator emulations (float32 allowed so the suite's float32
cases run). Discovery is left out: off an NPU the probe rightly says unavailable."""

from __future__ import annotations

from eagle_hal.conformance import run_suite
from eagle_hal.device import parse_device
from eagle_hal_npu.backend import NpuBackend
from eagle_hal_npu.plugin import DESCRIPTOR


def test_device_areas_pass_on_emulated_operators(emulation):
    backend = NpuBackend(DESCRIPTOR, parse_device("cpu"),
                         ops=emulation.emulated_ops(allow_float32=True))
    report = run_suite("cpu", backend=backend, areas=("sampling", "attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
    assert report.counts("sampling")["pass"] > 0
