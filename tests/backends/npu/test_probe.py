"""Tests for eagle_hal_npu's probe: not installed, failing import, no device, broken autoload.

Each situation is made real: a fake ``torch_npu`` package on ``sys.path`` (whose import
may raise), a stand-in device module behind ``torch.get_device_module``, and, for the
autoload case, a subprocess with a ``torch.backends`` entry point that breaks ``import
torch`` exactly as a broken CANN install does.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal_npu import plugin
from eagle_hal_npu.backend import NpuBackend

BROKEN_IMPORT = "raise ImportError('libascendcl.so: cannot open shared object file')\n"
CANN_HINT = "CANN toolkit was not found"


@pytest.fixture
def npu_devices(monkeypatch, stand_ins):
    """Make ``torch.get_device_module('npu')`` answer with a stand-in of ``count`` devices."""
    original = torch.get_device_module

    def install(count=0, error=None, registered=True):
        def get_device_module(device=None):
            if device == "npu":
                if not registered:
                    raise RuntimeError("Expected one of cpu, cuda, ... device type: npu")
                return stand_ins.devices(count, error=error)
            return original(device)

        monkeypatch.setattr(torch, "get_device_module", get_device_module)

    return install


def test_not_installed():
    """Without torch_npu the probe says it is not installed and how to install it."""
    if importlib.util.find_spec("torch_npu") is not None:
        pytest.skip("torch_npu is installed here")
    result = plugin.probe()
    assert not result.ok and result.reason.startswith("torch_npu is not installed")
    assert "pip install torch-npu" in result.reason


def test_installed_but_failing_to_import(fake_extension):
    """A torch_npu whose import raises: 'installed but failed to import: <message>'."""
    fake_extension.add("torch_npu", "raise RuntimeError('undefined symbol: aclrtFoo')\n")
    result = plugin.probe()
    assert not result.ok
    assert result.reason == (
        "torch_npu is installed but failed to import: RuntimeError: undefined symbol: aclrtFoo"
    )


@pytest.mark.parametrize("message", [
    "ImportError: libhccl.so: cannot open shared object file",
    "RuntimeError: ERR00008 PTA resource not found",
])
def test_missing_cann_is_named(fake_extension, message):
    """libhccl.so / ERR00008 at import: the reason says CANN is missing and how to fix it."""
    kind, text = message.split(": ", 1)
    fake_extension.add("torch_npu", f"raise {kind}({text!r})\n")
    reason = plugin.probe().reason
    assert reason.startswith(f"torch_npu is installed but failed to import: {message}")
    assert "CANN toolkit was not found" in reason and "set_env.sh" in reason


def test_version_pairing_rule():
    """torch_npu X.Y.Z[.postN] pairs with torch X.Y.Z only; local suffixes are ignored."""
    assert plugin.version_mismatch("2.5.1+cpu", "2.5.1.post2") is None
    assert plugin.version_mismatch("2.6.0", "2.6.0rc3") is None
    reason = plugin.version_mismatch("2.13.0+cpu", "2.5.1")
    assert reason.startswith("torch_npu 2.5.1 is built for torch 2.5.1, but torch is 2.13.0+cpu")
    assert plugin.version_mismatch("2.5.1", "unknown") is None


def test_version_mismatch_is_reported_before_import(fake_extension):
    """An installed torch_npu distribution for another torch: refused without importing it."""
    package = fake_extension.add("torch_npu", "raise AssertionError('must not be imported')\n")
    info = package.parent / "torch_npu-2.1.0.post8.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: torch_npu\nVersion: 2.1.0.post8\n")
    result = plugin.probe()
    assert not result.ok
    assert result.reason.startswith(
        f"torch_npu 2.1.0.post8 is built for torch 2.1.0, but torch is {torch.__version__}"
    )


def test_no_device_visible_names_the_variable(fake_extension, npu_devices, monkeypatch):
    """torch_npu imports but sees no NPU: the reason names ASCEND_RT_VISIBLE_DEVICES."""
    fake_extension.add("torch_npu", "")
    npu_devices(count=0)
    monkeypatch.setenv("ASCEND_RT_VISIBLE_DEVICES", "4,5")
    result = plugin.probe()
    assert not result.ok
    assert result.reason == "no Ascend NPU device visible (ASCEND_RT_VISIBLE_DEVICES='4,5')"


def test_extension_that_registers_no_device_type(fake_extension, npu_devices):
    """torch_npu imports yet torch knows no 'npu' device type: said so, not raised."""
    fake_extension.add("torch_npu", "")
    npu_devices(registered=False)
    result = plugin.probe()
    assert not result.ok and "has no 'npu' device type" in result.reason


def test_runtime_failure_and_success(fake_extension, npu_devices):
    """A raising NPU runtime is reported; visible NPUs make the backend available."""
    fake_extension.add("torch_npu", "")
    npu_devices(error=RuntimeError("drvError 87"))
    assert "drvError 87" in plugin.probe().reason
    npu_devices(count=4)
    result = plugin.probe()
    assert result.ok and "4 Ascend NPU devices visible" in result.reason


def test_backend_imports_the_extension_when_built(fake_extension):
    """Selecting npu imports torch_npu (torch learns 'npu' from it) and declares hccl."""
    fake_extension.add("torch_npu", "LOADED = True\n")
    backend = NpuBackend(plugin.DESCRIPTOR, parse_device("npu:0"))
    assert sys.modules["torch_npu"].LOADED
    assert backend.capabilities.distributed_backend == "hccl"


def _broken_autoload_site(root):
    """A torch_npu that raises on import, registered for torch's device-backend autoload."""
    package = root / "torch_npu"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(BROKEN_IMPORT)
    paired = torch.__version__.split("+")[0]  # a torch_npu release paired with this torch
    info = root / f"torch_npu-{paired}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch-npu\nVersion: {paired}\n")
    (info / "entry_points.txt").write_text("[torch.backends]\ntorch_npu = torch_npu:_autoload\n")


def _list_backends(site, **env_extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_HAL_")}
    env.update(PYTHONPATH=str(site), **env_extra)
    result = subprocess.run(
        [sys.executable, "-m", "eagle_hal.cli", "backends", "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return {entry["name"]: entry for entry in json.loads(result.stdout)}


def test_broken_autoload_is_reported_not_raised(tmp_path):
    """A torch_npu that breaks `import torch` is reported, with the autoload switch named."""
    _broken_autoload_site(tmp_path)
    listed = _list_backends(tmp_path)
    npu = listed["npu"]["reason"]
    assert npu.startswith("torch_npu is installed but failed to import")
    assert "libascendcl.so" in npu and "TORCH_DEVICE_BACKEND_AUTOLOAD=0" in npu
    assert not listed["cpu"]["available"]
    assert "import torch failed" in listed["cpu"]["reason"]
    # With the autoload off torch imports; the probe itself then meets the broken import.
    listed = _list_backends(tmp_path, TORCH_DEVICE_BACKEND_AUTOLOAD="0")
    assert listed["cpu"]["available"]
    assert listed["npu"]["reason"].startswith(
        "torch_npu is installed but failed to import: "
        "ImportError: libascendcl.so: cannot open shared object file (the " + CANN_HINT
    )
