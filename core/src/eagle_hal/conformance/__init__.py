"""The per-device conformance suite: a pytest plugin vendors run against their backend.

The suite is opt-in. Its plugin (``eagle_hal.conformance.plugin``, registered through the
``pytest11`` entry point) adds options and otherwise does nothing; given
``--eagle-hal-device`` it collects the checks under ``eagle_hal/conformance/checks`` and runs
them against the selected backend:

    pytest --pyargs eagle_hal.conformance --eagle-hal-device npu:0 [--eagle-hal-backend NAME]
    eagle-hal conformance --device npu:0 [--backend NAME] [--report FILE]

Checks are grouped in areas (``AREAS``), declare what they need from ``Capabilities``
(``requirements``) and are reported per area and per check (``report``). See
``docs/conformance.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle_hal.conformance.areas import AREAS

__all__ = ["AREAS", "CheckResult", "ConformanceReport", "Outcome", "run_suite"]

if TYPE_CHECKING:  # pragma: no cover
    from eagle_hal.conformance.report import CheckResult, ConformanceReport, Outcome
    from eagle_hal.conformance.runner import run_suite


def __getattr__(name: str) -> Any:
    if name in ("CheckResult", "ConformanceReport", "Outcome"):
        from eagle_hal.conformance import report

        return getattr(report, name)
    if name == "run_suite":
        from eagle_hal.conformance.runner import run_suite

        return run_suite
    raise AttributeError(f"module 'eagle_hal.conformance' has no attribute {name!r}")
