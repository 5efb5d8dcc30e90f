"""Tests for ``eagle-hal backends`` (eagle_hal.commands.backends) and the CLI entry."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch
from eagle_hal import cli
from eagle_hal.registry import reset_default_registry

REPO = Path(__file__).resolve().parents[2]
JSON_KEYS = {
    "name",
    "distribution",
    "version",
    "device_types",
    "api_version",
    "available",
    "status",
    "reason",
    "capabilities",
}
VENDORS = ("cuda", "rocm", "npu", "xpu", "musa")


@pytest.fixture
def default_registry_env(monkeypatch):
    """The process-wide registry, fresh and free of selection variables, for one test."""
    for variable in ("EAGLE_HAL_PLUGINS", "EAGLE_HAL_DISABLE", "EAGLE_HAL_BACKEND"):
        monkeypatch.delenv(variable, raising=False)
    reset_default_registry()
    yield
    reset_default_registry()


def _expected_reason_fragment(vendor: str) -> str:
    """What the probe must say on this machine, judged from torch and the import system."""
    if vendor == "cuda":
        assert torch.version.cuda is None, "this test describes a machine without CUDA torch"
        return "built without CUDA"
    if vendor == "rocm":
        return "not a ROCm build"
    if vendor == "xpu":
        return "built without XPU"
    extension = f"torch_{vendor}"
    assert importlib.util.find_spec(extension) is None
    return f"{extension} is not installed"


def test_json_lists_every_backend_with_specific_reasons(default_registry_env, capsys):
    """--json: cpu available; each vendor unavailable, with the reason this machine implies."""
    assert cli.main(["backends", "--json"]) == 0
    listed = {entry["name"]: entry for entry in json.loads(capsys.readouterr().out)}
    assert {"cpu", *VENDORS} <= set(listed)
    for entry in listed.values():
        assert set(entry) == JSON_KEYS
    cpu = listed["cpu"]
    assert cpu["available"] is True and cpu["distribution"] == "eagle-hal"
    assert cpu["status"] == "available"
    assert cpu["capabilities"]["distributed_backend"] == "gloo"
    if torch.accelerator.is_available():
        pytest.skip("the vendor reasons below describe a machine without accelerators")
    for vendor in VENDORS:
        entry = listed[vendor]
        assert entry["available"] is False and entry["status"] == "unavailable"
        assert _expected_reason_fragment(vendor) in entry["reason"]
        assert entry["distribution"] == f"eagle-hal-{vendor}"
        assert entry["version"] == metadata.version(f"eagle-hal-{vendor}")
        # the NPU plugin is written against API 1.0 (no windows), the others against 1.1
        assert entry["api_version"] == ("1.0" if vendor == "npu" else "1.1")
        assert entry["capabilities"]["visible_devices_env"]


def test_table_shows_status_reasons_and_capabilities(default_registry_env, capsys):
    """The default output is a readable table of every backend plus a capabilities table."""
    assert cli.main(["backends"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == [
        "NAME",
        "DISTRIBUTION",
        "VERSION",
        "DEVICES",
        "API",
        "STATUS",
        "REASON",
    ]
    assert "Capabilities" in out
    for name in ("cpu", *VENDORS):
        assert any(line.startswith(f"{name} ") for line in out.splitlines())
    for collective in ("gloo", "nccl", "hccl", "xccl", "mccl"):
        assert collective in out


def test_user_errors_become_one_line_and_status_3(default_registry_env, capsys, monkeypatch):
    """A BackendUnavailable from a command prints a message, not a traceback, and returns 3
    (the exit status of an unusable backend)."""
    from eagle_hal.commands import backends
    from eagle_hal.errors import BackendUnavailable

    def failing_run(args):
        raise BackendUnavailable("no backend for you")

    monkeypatch.setattr(backends, "run", failing_run)
    assert cli.main(["backends"]) == 3
    assert "BackendUnavailable: no backend for you" in capsys.readouterr().err


def _run(args, env_extra=None, cwd=None):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_HAL_")}
    env.update(env_extra or {})
    return subprocess.run(
        args, capture_output=True, text=True, env=env, cwd=cwd, timeout=120, check=False
    )


def test_console_script_survives_a_broken_plugin(tmp_path):
    """The installed `eagle-hal` with a broken plugin on the path: listed, others intact."""
    site = tmp_path / "site"
    info = site / "acme_broken-0.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-broken\nVersion: 0.9\n")
    (info / "entry_points.txt").write_text("[eagle_hal.backends]\nacme = acme_broken_plugin\n")
    (site / "acme_broken_plugin.py").write_text("raise OSError('libacme.so: cannot open')\n")
    script = Path(sys.executable).parent / "eagle-hal"
    command = [str(script)] if script.exists() else [sys.executable, "-m", "eagle_hal.cli"]
    result = _run([*command, "backends", "--json"], {"PYTHONPATH": str(site)})
    assert result.returncode == 0, result.stderr
    listed = {entry["name"]: entry for entry in json.loads(result.stdout)}
    assert listed["acme"]["available"] is False
    assert listed["acme"]["distribution"] == "acme-broken" and listed["acme"]["version"] == "0.9"
    assert "libacme.so: cannot open" in listed["acme"]["reason"]
    assert listed["cpu"]["available"] is True


_LAZINESS_CHECK = """
import json, sys
import eagle_hal
report = {"after_import": sorted(m for m in ("torch", "pluggy") if m in sys.modules)}
eagle_hal.select_backend("cpu")
loaded = sorted(m for m in sys.modules if m.startswith("eagle_hal_"))
report["implementations"] = [m for m in loaded if m.endswith(".backend")]
report["plugins"] = [m for m in loaded if m.endswith(".plugin")]
report["vendor_libraries"] = sorted(
    m for m in ("torch_npu", "torch_musa", "intel_extension_for_pytorch") if m in sys.modules
)
print(json.dumps(report))
"""


def test_import_is_cheap_and_selection_imports_only_what_it_needs():
    """import eagle_hal loads neither torch nor pluggy; selecting cpu loads no vendor code."""
    result = _run([sys.executable, "-c", _LAZINESS_CHECK])
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["after_import"] == []
    assert report["implementations"] == []  # no vendor Backend implementation was imported
    assert {f"eagle_hal_{vendor}.plugin" for vendor in VENDORS} <= set(report["plugins"])
    assert report["vendor_libraries"] == []
