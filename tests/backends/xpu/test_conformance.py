"""The conformance suite's device areas through the xpu backend's classes bound to the CPU:
the shared Triton kernels, interpreted. About 15 minutes on 2 cores, so it runs only with
EAGLE_HAL_INTERPRETED_CONFORMANCE=1 (and TRITON_INTERPRET=1)."""

from __future__ import annotations

import pytest
from eagle_hal import settings
from eagle_hal.device import parse_device
from eagle_hal_xpu.backend import XpuBackend
from eagle_hal_xpu.plugin import DESCRIPTOR

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not settings.get("EAGLE_HAL_INTERPRETED_CONFORMANCE")
        or not settings.triton_interpreted(),
        reason="interpreted Triton conformance takes ~15 min; set "
        "EAGLE_HAL_INTERPRETED_CONFORMANCE=1 TRITON_INTERPRET=1",
    ),
]


def test_device_areas_pass_through_the_interpreted_triton_path():
    from eagle_hal.conformance import run_suite

    report = run_suite("cpu", backend=XpuBackend(DESCRIPTOR, parse_device("cpu")),
                       areas=("sampling", "attention", "kv"))
    failures = [r for r in report.results if r.outcome.value in ("fail", "unexpected-pass")]
    assert not failures, failures
