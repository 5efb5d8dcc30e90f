"""The pytest plugin entry point (``pytest11``): options, and nothing else unless enabled.

Like pytest's own opt-in plugins, this module only adds command-line options. When
``--eagle-hal-device`` is given it registers a ``ConformanceSession`` (collection, gating,
results, report) and the suite's fixtures; without it, a pytest run is unchanged.
"""

from __future__ import annotations

from typing import Any

__all__ = ["pytest_addoption", "pytest_configure"]


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("eagle-hal", "eagle-hal per-device conformance suite")
    group.addoption(
        "--eagle-hal-device",
        default=None,
        metavar="DEVICE",
        help="run the eagle-hal conformance checks on DEVICE (cpu, cuda:0, npu, ...); "
        "without this option the plugin does nothing",
    )
    group.addoption(
        "--eagle-hal-backend",
        default=None,
        metavar="NAME",
        help="force the backend by name (default: the registry's choice for the device)",
    )
    group.addoption(
        "--eagle-hal-plugin",
        default=None,
        metavar="MODULE",
        help="import the backend from this plugin module (one with an eagle_hal_backends "
        "hook) instead of the installed entry points: for a plugin under development",
    )
    group.addoption(
        "--eagle-hal-areas",
        default=None,
        metavar="AREA[,AREA...]",
        help="run only these areas (discovery, sampling, model_kernels, attention, kv, graphs, "
        "end_to_end, soak)",
    )
    group.addoption(
        "--eagle-hal-report",
        default=None,
        metavar="FILE",
        help="write the JSON report to FILE (and the table to FILE with suffix .md)",
    )


def pytest_configure(config: Any) -> None:
    if config.getoption("eagle_hal_device", None) is None:
        return
    from eagle_hal.conformance import fixtures
    from eagle_hal.conformance.session import SESSION_PLUGIN_NAME, ConformanceSession

    config.addinivalue_line(
        "markers", "eagle_hal_requires(*needs): capabilities a conformance check needs"
    )
    config.addinivalue_line("python_files", "check_*.py")
    config.pluginmanager.register(ConformanceSession(config), SESSION_PLUGIN_NAME)
    config.pluginmanager.register(fixtures, "eagle_hal_conformance_fixtures")
