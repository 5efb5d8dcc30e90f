"""Tests for eagle_hal_rocm's probe and backend, against stand-in torch builds."""

from __future__ import annotations

import torch
from eagle_hal.device import parse_device
from eagle_hal_rocm import plugin
from eagle_hal_rocm.backend import RocmBackend


def test_cpu_and_cuda_builds_are_not_rocm(stand_ins):
    """Any build without version.hip is refused, saying what it is built for."""
    cpu = plugin.judge_torch_build(stand_ins.torch("2.9.0+cpu")).reason
    cuda = plugin.judge_torch_build(stand_ins.torch("2.9.0+cu124", cuda="12.4")).reason
    assert "not a ROCm build (it is built for the CPU only)" in cpu
    assert "not a ROCm build (it is built for CUDA)" in cuda


def test_no_visible_device_names_the_variables(stand_ins, monkeypatch):
    """No AMD GPU: names HIP_VISIBLE_DEVICES, plus the other visibility variables set."""
    monkeypatch.setenv("HIP_VISIBLE_DEVICES", "3")
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    result = plugin.judge_torch_build(stand_ins.torch(hip="6.2", devices=stand_ins.devices(0)))
    assert not result.ok
    assert "no AMD GPU visible (HIP_VISIBLE_DEVICES='3', ROCR_VISIBLE_DEVICES='')" in result.reason


def test_runtime_failure_and_success(stand_ins):
    """A raising HIP runtime is reported; visible GPUs make it available."""
    broken = stand_ins.devices(error=RuntimeError("hipErrorNoBinaryForGpu"))
    assert (
        "hipErrorNoBinaryForGpu"
        in plugin.judge_torch_build(stand_ins.torch(hip="6.2", devices=broken)).reason
    )
    result = plugin.judge_torch_build(stand_ins.torch(hip="6.2", devices=stand_ins.devices(8)))
    assert result.ok and "8 AMD GPUs visible" in result.reason


def test_real_probe_on_this_machine():
    """On this machine's torch the probe agrees with torch's own build information."""
    result = plugin.probe()
    if torch.version.hip is None:
        assert not result.ok and "not a ROCm build" in result.reason
    else:
        assert result.ok == torch.cuda.is_available()


def test_aliases_map_to_torch_cuda():
    """rocm:N and hip:N bind the backend to torch's 'cuda' device type."""
    for text in ("rocm:2", "hip:2", "cuda:2"):
        backend = RocmBackend(plugin.DESCRIPTOR, parse_device(text))
        assert backend.torch_device == torch.device("cuda", 2)
    caps = RocmBackend(plugin.DESCRIPTOR, parse_device("rocm")).capabilities
    assert caps.distributed_backend == "nccl"
