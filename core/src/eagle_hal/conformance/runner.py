"""Running the suite from Python (``eagle-hal conformance`` and tests): ``run_suite``.

The run is an in-process ``pytest.main`` over the checks directory with its own empty
configuration, so a surrounding project's pytest settings never change what is checked.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eagle_hal import settings
from eagle_hal.backend import Backend
from eagle_hal.conformance.report import ConformanceReport
from eagle_hal.conformance.session import CHECKS_DIR, RUNNER_LINK_NAME

__all__ = ["SuiteDidNotRun", "run_suite"]


class SuiteDidNotRun(RuntimeError):
    """pytest stopped before the suite produced a report (a usage or collection error)."""


class _RunnerLink:
    """Carries a backend object in and the report out of one in-process pytest run."""

    def __init__(self, backend: Backend | None) -> None:
        self.backend = backend
        self.report: ConformanceReport | None = None


def pytest_args(
    device: str,
    *,
    backend_name: str | None = None,
    plugin_module: str | None = None,
    areas: Sequence[str] | None = None,
    report_path: str | Path | None = None,
    quiet: bool = True,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The pytest command line of a suite run (what ``run_suite`` passes to pytest)."""
    args = [
        str(CHECKS_DIR),
        "-c", os.devnull,  # no surrounding ini: the suite's behaviour is the suite's own
        "--rootdir", str(CHECKS_DIR),
        "-p", "no:cacheprovider",
        "-W", "ignore::pytest.PytestAssertRewriteWarning",
        "--eagle-hal-device", device,
    ]
    if settings.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):  # pytest's rule: any value
        args += ["-p", "eagle_hal.conformance.plugin"]
    if backend_name:
        args += ["--eagle-hal-backend", backend_name]
    if plugin_module:
        args += ["--eagle-hal-plugin", plugin_module]
    if areas:
        args += ["--eagle-hal-areas", ",".join(areas)]
    if report_path:
        args += ["--eagle-hal-report", str(report_path)]
    args += ["-q", "--no-header", "-rN"] if quiet else ["-rfE"]
    return [*args, *extra_args]


def run_suite(
    device: str,
    backend_name: str | None = None,
    *,
    backend: Backend | None = None,
    plugin_module: str | None = None,
    areas: Sequence[str] | None = None,
    report_path: str | Path | None = None,
    quiet: bool = True,
    extra_args: Sequence[str] = (),
) -> ConformanceReport:
    """Run the conformance suite in this process and return its report.

    The backend is ``backend`` (an already constructed object, e.g. a test double) or the
    one ``plugin_module`` declares or, by default, the registry's choice for ``device``
    (``backend_name`` forces one). Raises ``SuiteDidNotRun`` when pytest produced no
    report (bad arguments, a check module that fails to import).
    """
    import pytest

    link = _RunnerLink(backend)
    args = pytest_args(
        device, backend_name=backend_name, plugin_module=plugin_module, areas=areas,
        report_path=report_path, quiet=quiet, extra_args=extra_args,
    )
    status = pytest.main(args, plugins=[_NamedPlugin(link)])
    if link.report is None or status in (
        pytest.ExitCode.USAGE_ERROR, pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.INTERRUPTED
    ):
        raise SuiteDidNotRun(
            f"pytest exited with {status!r} before the suite reported; args: {args}")
    return link.report


class _NamedPlugin:
    """Registers the link under its well-known name as soon as pytest configures."""

    def __init__(self, link: _RunnerLink) -> None:
        self.link = link

    def pytest_configure(self, config: Any) -> None:
        if config.pluginmanager.get_plugin(RUNNER_LINK_NAME) is None:
            config.pluginmanager.register(self.link, RUNNER_LINK_NAME)
