"""Tests for eagle_hal_musa's probe: not installed, failing import, no device, broken autoload."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal_musa import plugin
from eagle_hal_musa.backend import MusaBackend

BROKEN_IMPORT = "raise OSError('libmusart.so.2: cannot open shared object file')\n"


@pytest.fixture
def musa_devices(monkeypatch, stand_ins):
    """Make ``torch.get_device_module('musa')`` answer with a stand-in of ``count`` devices."""
    original = torch.get_device_module

    def install(count=0, error=None):
        def get_device_module(device=None):
            if device == "musa":
                return stand_ins.devices(count, error=error)
            return original(device)

        monkeypatch.setattr(torch, "get_device_module", get_device_module)

    return install


def test_not_installed():
    """Without torch_musa the probe says it is not installed."""
    if importlib.util.find_spec("torch_musa") is not None:
        pytest.skip("torch_musa is installed here")
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("torch_musa is not installed")


def test_installed_but_failing_to_import(fake_extension):
    """A torch_musa whose import raises: 'installed but failed to import: <message>'."""
    fake_extension.add("torch_musa", BROKEN_IMPORT)
    assert plugin.probe().reason == (
        "torch_musa is installed but failed to import: "
        "OSError: libmusart.so.2: cannot open shared object file"
    )


def test_no_device_visible_then_visible(fake_extension, musa_devices, monkeypatch):
    """No GPU names MUSA_VISIBLE_DEVICES; visible GPUs make the backend available."""
    fake_extension.add("torch_musa", "")
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "-1")
    musa_devices(count=0)
    result = plugin.probe()
    assert not result.ok
    assert result.reason == "no Moore Threads GPU device visible (MUSA_VISIBLE_DEVICES='-1')"
    musa_devices(count=1)
    result = plugin.probe()
    assert result.ok and "1 Moore Threads GPU device visible" in result.reason


def test_backend_declares_mccl(fake_extension):
    """The implementation imports torch_musa when built and declares mccl."""
    fake_extension.add("torch_musa", "")
    backend = MusaBackend(plugin.DESCRIPTOR, parse_device("musa:1"))
    assert backend.capabilities.distributed_backend == "mccl"
    assert backend.capabilities.visible_devices_env == "MUSA_VISIBLE_DEVICES"


def test_broken_autoload_is_reported_not_raised(tmp_path):
    """A torch_musa that breaks `import torch` through the autoload is reported by the probe."""
    (tmp_path / "torch_musa").mkdir()
    (tmp_path / "torch_musa" / "__init__.py").write_text(BROKEN_IMPORT)
    info = tmp_path / "torch_musa-2.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_musa\nVersion: 2.1.0\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_musa = torch_musa:_init\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_HAL_")}
    env["PYTHONPATH"] = str(tmp_path)
    code = "import json; from eagle_hal_musa.plugin import probe; print(json.dumps(probe().reason))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    reason = json.loads(result.stdout)
    assert reason.startswith("torch_musa is installed but failed to import")
    assert "libmusart.so.2" in reason and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in reason
