"""The state of one conformance run: the backend under test, gating, results, the report.

Registered by the plugin only when ``--eagle-hal-device`` is given (the plugin then also
adds ``check_*.py`` to ``python_files`` so the ``checks/check_<area>.py`` modules are
collected, with assertion rewriting). It deselects everything but the areas asked for,
skips checks whose needs the backend lacks, marks the backend's declared known failures,
records every outcome and, at the end, writes and prints the report.
"""

from __future__ import annotations

import fnmatch
import importlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from eagle_hal.backend import Backend
from eagle_hal.conformance.areas import AREAS
from eagle_hal.conformance.report import (
    CheckResult,
    ConformanceReport,
    Outcome,
    describe_environment,
)
from eagle_hal.conformance.requirements import MARK_NAME, unmet
from eagle_hal.errors import BackendUnavailable, EagleHalError

__all__ = [
    "RUNNER_LINK_NAME",
    "SESSION_PLUGIN_NAME",
    "ConformanceSession",
    "check_id",
    "current_session",
    "load_plugin_backend",
]

CHECKS_DIR = Path(__file__).resolve().parent / "checks"
# The name the plugin registers the run's ConformanceSession under.
SESSION_PLUGIN_NAME = "eagle_hal_conformance_session"
RUNNER_LINK_NAME = "eagle_hal_conformance_runner_link"
_XFAIL_PREFIX = "eagle-hal known failure: "


def area_of(item: Any) -> str:
    return Path(str(item.path)).stem.removeprefix("check_")


def check_id(item: Any) -> str:
    """``"<area>/<check>[params]"``: the name reports use and known failures match."""
    return f"{area_of(item)}/{item.name.removeprefix('test_')}"


def load_plugin_backend(module_name: str, device: str, backend_name: str | None) -> Backend:
    """Select a backend from one plugin module, bypassing entry points (a plugin under
    development). Raises ``BackendUnavailable`` when the module declares no usable match."""
    from eagle_hal._discovery import api_compatible
    from eagle_hal.device import parse_device

    module = importlib.import_module(module_name)
    descriptors = list(module.eagle_hal_backends())
    spec = parse_device(device, extra_kinds={k for d in descriptors for k in d.device_types})
    matches = [
        d for d in descriptors
        if (backend_name is None or d.name == backend_name) and spec.kind in d.device_types
    ]
    if not matches:
        raise BackendUnavailable(
            f"plugin module {module_name!r} declares no backend"
            f"{f' named {backend_name!r}' if backend_name else ''} serving device '{spec}'"
        )
    descriptor = max(matches, key=lambda d: d.priority)
    if not api_compatible(descriptor.api_version):
        raise BackendUnavailable(
            f"backend {descriptor.name!r}: API {descriptor.api_version} is incompatible"
        )
    availability = descriptor.probe()
    if not availability.ok:
        raise BackendUnavailable(
            f"backend {descriptor.name!r} is unavailable: {availability.reason}"
        )
    impl_module, _, class_name = descriptor.implementation.partition(":")
    backend_class = getattr(importlib.import_module(impl_module), class_name)
    return backend_class(descriptor, spec)


def current_session(config: Any) -> ConformanceSession | None:
    """The ``ConformanceSession`` registered on ``config``; ``None`` when the suite is off."""
    return config.pluginmanager.get_plugin(SESSION_PLUGIN_NAME)


class ConformanceSession:
    """The per-run state; a pytest plugin object (hooks below)."""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.device: str = config.getoption("eagle_hal_device")
        self.backend_name: str | None = config.getoption("eagle_hal_backend")
        self.plugin_module: str | None = config.getoption("eagle_hal_plugin")
        self.report_path: str | None = config.getoption("eagle_hal_report")
        areas = config.getoption("eagle_hal_areas")
        asked = AREAS if not areas else tuple(a.strip() for a in areas.split(",") if a.strip())
        unknown = set(asked) - set(AREAS)
        self.areas = tuple(a for a in AREAS if a in asked)
        if unknown:
            raise pytest.UsageError(
                f"unknown conformance areas {sorted(unknown)}; known: {', '.join(AREAS)}"
            )
        self.results: dict[str, CheckResult] = {}
        self.report: ConformanceReport | None = None
        self._backend: Backend | None = None
        self._selection_error: BaseException | None = None
        self._selected = False

    # -- the backend under test ----------------------------------------------------------

    def _select(self) -> None:
        if self._selected:
            return
        self._selected = True
        link = self.config.pluginmanager.get_plugin(RUNNER_LINK_NAME)
        try:
            if link is not None and link.backend is not None:
                self._backend = link.backend
            elif self.plugin_module:
                self._backend = load_plugin_backend(
                    self.plugin_module, self.device, self.backend_name
                )
            else:
                from eagle_hal.registry import select_backend

                self._backend = select_backend(self.device, backend=self.backend_name)
        except (EagleHalError, ImportError, ValueError, TypeError, AttributeError) as exc:
            self._selection_error = exc

    @property
    def backend(self) -> Backend:
        """The backend under test; raises its selection error (every check then fails)."""
        self._select()
        if self._backend is None:
            assert self._selection_error is not None
            raise BackendUnavailable(
                f"selecting a backend for device {self.device!r} failed: "
                f"{type(self._selection_error).__name__}: {self._selection_error}"
            ) from self._selection_error
        return self._backend

    @property
    def selection_error(self) -> BaseException | None:
        self._select()
        return self._selection_error

    # -- collection ----------------------------------------------------------------------

    def pytest_collection_modifyitems(self, config: Any, items: list[Any]) -> None:
        # Only the suite's own modules, and only the areas asked for.
        def wanted(item: Any) -> bool:
            return Path(str(item.path)).parent == CHECKS_DIR and area_of(item) in self.areas

        chosen = [item for item in items if wanted(item)]
        dropped = [item for item in items if not wanted(item)]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = chosen
        items.sort(
            key=lambda item: AREAS.index(area_of(item)) if area_of(item) in AREAS else len(AREAS)
        )
        known = self._known_failures()
        for item in items:
            identifier = check_id(item)
            for pattern, reason in known.items():
                if fnmatch.fnmatchcase(identifier, pattern):
                    item.add_marker(pytest.mark.xfail(reason=_XFAIL_PREFIX + reason, strict=True))
                    break

    def _known_failures(self) -> dict[str, str]:
        if self.selection_error is not None:
            return {}
        try:
            return dict(self.backend.known_failures())
        except Exception:  # reported by the discovery area's check of known_failures()
            return {}

    # -- gating and results --------------------------------------------------------------

    def pytest_runtest_setup(self, item: Any) -> None:
        for mark in item.iter_markers(MARK_NAME):
            for need in mark.args:
                reason = unmet(need, self.backend)
                if reason:
                    pytest.skip(reason)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: Any, call: Any) -> Iterator[None]:
        outcome = yield
        report = outcome.get_result()
        if call.excinfo is not None and not call.excinfo.errisinstance(pytest.skip.Exception):
            report.eagle_hal_message = call.excinfo.exconly().strip()
        report.eagle_hal_check = check_id(item)
        report.eagle_hal_area = area_of(item)

    def pytest_runtest_logreport(self, report: Any) -> None:
        identifier = getattr(report, "eagle_hal_check", None)
        if identifier is None:
            return
        result = _classify(report)
        if result is None:
            return
        outcome, message = result
        previous = self.results.get(identifier)
        if previous is not None and previous.outcome is not Outcome.PASS:
            return  # a teardown outcome never hides the failure of the call
        duration = (previous.duration_s if previous else 0.0) + float(report.duration)
        self.results[identifier] = CheckResult(
            identifier, report.eagle_hal_area, outcome, message, duration
        )

    # -- the report ------------------------------------------------------------------------

    def pytest_sessionfinish(self, session: Any, exitstatus: int) -> None:
        error = self.selection_error
        environment = describe_environment(
            self.device,
            self._backend,
            None if error is None else f"{type(error).__name__}: {error}",
        )
        environment["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        self.report = ConformanceReport(environment, tuple(self.results.values()), self.areas)
        if self.report_path:
            self.report.write(self.report_path)
        link = self.config.pluginmanager.get_plugin(RUNNER_LINK_NAME)
        if link is not None:
            link.report = self.report
        if self.report.failed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is not None:
            terminalreporter.write_line("")
            for line in self.report.format_table().splitlines():
                terminalreporter.write_line(line)


def _classify(report: Any) -> tuple[Outcome, str] | None:
    """Map one phase's pytest report to an outcome; ``None`` for a plain passing phase
    other than the call."""
    message = getattr(report, "eagle_hal_message", "")
    if hasattr(report, "wasxfail"):
        if report.skipped:
            reason = report.wasxfail.removeprefix(_XFAIL_PREFIX)
            return Outcome.EXPECTED_FAIL, f"{reason} (failed as declared: {message})"
        return Outcome.UNEXPECTED_PASS, report.wasxfail.removeprefix(_XFAIL_PREFIX)
    if report.failed:
        longrepr = str(report.longrepr) if report.longrepr else ""
        if longrepr.startswith("[XPASS(strict)]"):
            reason = longrepr.removeprefix("[XPASS(strict)]").strip().removeprefix(_XFAIL_PREFIX)
            return Outcome.UNEXPECTED_PASS, f"declared a known failure ({reason}) but passed"
        phase = "" if report.when == "call" else f"error in {report.when}: "
        return Outcome.FAIL, phase + (message or longrepr.splitlines()[-1] if longrepr else message)
    if report.skipped:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        return Outcome.SKIP, reason.removeprefix("Skipped: ")
    if report.when == "call":
        return Outcome.PASS, ""
    return None
