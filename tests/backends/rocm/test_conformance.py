"""The conformance suite's device areas through the rocm backend's classes bound to the CPU.

* With aiter's paged decode opted in and the aiter EMULATION installed as ``aiter``, without
  the Triton interpreter: decode cases the op takes (bfloat16, page size 16) go through the
  adapter and the emulation, everything else through the pure-torch shared path. Seconds.
* The shared Triton kernels, interpreted: about 15 minutes on 2 cores, so only with
  EAGLE_HAL_INTERPRETED_CONFORMANCE=1 (and TRITON_INTERPRET=1).
"""

from __future__ import annotations

import pytest
from eagle_hal import settings
from eagle_hal.conformance import run_suite
from eagle_hal.device import parse_device
from eagle_hal_rocm.backend import RocmBackend
from eagle_hal_rocm.plugin import DESCRIPTOR


def test_attention_and_kv_areas_pass_with_emulated_aiter(emulated_aiter, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    backend = RocmBackend(DESCRIPTOR, parse_device("cpu"))
    report = run_suite("cpu", backend=backend, areas=("attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
    calls = emulated_aiter.paged_attention_v1.calls
    assert calls and {c["block_size"] for c in calls} == {16}  # the decode cases it serves
    assert report.counts("attention")["pass"] > 0


@pytest.mark.slow
@pytest.mark.skipif(
    not settings.get("EAGLE_HAL_INTERPRETED_CONFORMANCE")
    or not settings.triton_interpreted(),
    reason="interpreted Triton conformance takes ~15 min; set "
    "EAGLE_HAL_INTERPRETED_CONFORMANCE=1 TRITON_INTERPRET=1",
)
def test_device_areas_pass_through_the_interpreted_triton_path():
    report = run_suite("cpu", backend=RocmBackend(DESCRIPTOR, parse_device("cpu")),
                       areas=("sampling", "attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
