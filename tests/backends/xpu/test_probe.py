"""Tests for eagle_hal_xpu's probe and backend, against stand-in torch builds."""

from __future__ import annotations

import torch
from eagle_hal.device import parse_device
from eagle_hal_xpu import plugin
from eagle_hal_xpu.backend import XpuBackend


def test_build_without_xpu_is_not_installed(stand_ins):
    """A torch built without XPU: the runtime is not installed, and how to get it."""
    result = plugin.judge_torch_build(stand_ins.torch("2.9.0+cpu"))
    assert not result.ok and "2.9.0+cpu was built without XPU support" in result.reason
    assert "XPU wheel index" in result.reason


def test_runtime_failing_to_initialise(stand_ins):
    """XPU support present but the runtime raising: 'installed but failed to initialise'."""
    broken = stand_ins.devices(error=RuntimeError("level_zero loader not found"))
    result = plugin.judge_torch_build(stand_ins.torch(xpu=broken))
    assert not result.ok
    assert "installed but failed to initialise: RuntimeError: level_zero loader not found" in (
        result.reason
    )


def test_no_device_then_devices(stand_ins, monkeypatch):
    """No Intel GPU names ZE_AFFINITY_MASK; visible GPUs make the backend available."""
    monkeypatch.setenv("ZE_AFFINITY_MASK", "9")
    result = plugin.judge_torch_build(stand_ins.torch(xpu=stand_ins.devices(0)))
    assert not result.ok and "no Intel GPU visible (ZE_AFFINITY_MASK='9')" in result.reason
    result = plugin.judge_torch_build(stand_ins.torch(xpu=stand_ins.devices(2)))
    assert result.ok and "2 Intel GPUs visible" in result.reason


def test_real_probe_on_this_machine():
    """On this machine's torch the probe agrees with torch's own view of XPU."""
    result = plugin.probe()
    assert result.ok == torch.xpu.is_available()
    if "+cpu" in torch.__version__:
        assert "built without XPU" in result.reason


def test_backend_binds_to_its_device():
    """The implementation binds to xpu:N and declares xccl and ZE_AFFINITY_MASK."""
    backend = XpuBackend(plugin.DESCRIPTOR, parse_device("xpu:1"))
    assert backend.torch_device == torch.device("xpu", 1)
    assert backend.capabilities.distributed_backend == "xccl"
    assert backend.capabilities.visible_devices_env == "ZE_AFFINITY_MASK"
