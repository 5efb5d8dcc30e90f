"""The conformance suite's device areas through the MUSA backend's classes bound to the CPU
(SDPA reference attention, reference sampling ops). Discovery is left out: off a MUSA
device the probe rightly says unavailable."""

from __future__ import annotations

from eagle_hal.conformance import run_suite
from eagle_hal.device import parse_device
from eagle_hal_musa.backend import MusaBackend
from eagle_hal_musa.plugin import DESCRIPTOR


def test_device_areas_pass_through_the_cpu_bound_backend():
    report = run_suite("cpu", backend=MusaBackend(DESCRIPTOR, parse_device("cpu")),
                       areas=("sampling", "attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
    assert report.counts("attention")["pass"] > 0 and report.counts("kv")["pass"] > 0
