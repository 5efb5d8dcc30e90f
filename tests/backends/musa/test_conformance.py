"""The conformance suite's device areas through the MUSA backend's classes bound to the CPU.
Discovery is left out: off a MUSA device the probe rightly says unavailable.

* As shipped: SDPA reference attention, reference sampling ops.
* With mate opted in and the mate EMULATION installed as ``mate``: the causal-mode cases
  in bfloat16 go through the adapter and the emulation, the rest through SDPA.
"""

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


def test_attention_and_kv_areas_pass_with_emulated_mate(emulated_mate):
    report = run_suite("cpu", backend=MusaBackend(DESCRIPTOR, parse_device("cpu")),
                       areas=("attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
    calls = emulated_mate.flash_attn_with_kvcache.calls
    assert {c["page_size"] for c in calls} == {1, 16, 64}  # every page size the suite runs
    assert all(c["causal"] for c in calls)
