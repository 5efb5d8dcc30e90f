"""Tests for eagle_hal_cuda's probe and backend, against stand-in torch builds."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.device import parse_device
from eagle_hal.probing import TorchImport
from eagle_hal.registry import Registry
from eagle_hal_cuda import plugin
from eagle_hal_cuda.backend import CudaBackend


def test_cpu_build_says_built_without_cuda(stand_ins):
    """A torch without CUDA or HIP is reported as such."""
    reason = plugin.judge_torch_build(stand_ins.torch("2.9.0+cpu")).reason
    assert "2.9.0+cpu was built without CUDA" in reason


def test_rocm_build_points_to_the_rocm_backend(stand_ins):
    """A ROCm build (version.hip set) is left to the rocm backend."""
    result = plugin.judge_torch_build(stand_ins.torch(cuda=None, hip="6.2.1"))
    assert not result.ok and "ROCm build (HIP 6.2.1)" in result.reason and "'rocm'" in result.reason


def test_no_visible_device_names_the_variable(stand_ins, monkeypatch):
    """A CUDA build without devices names CUDA_VISIBLE_DEVICES and its value."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    result = plugin.judge_torch_build(stand_ins.torch(cuda="12.4", devices=stand_ins.devices(0)))
    assert not result.ok and "no CUDA device visible (CUDA_VISIBLE_DEVICES='')" in result.reason
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    result = plugin.judge_torch_build(stand_ins.torch(cuda="12.4", devices=stand_ins.devices(0)))
    assert "CUDA_VISIBLE_DEVICES is unset" in result.reason


def test_runtime_failure_is_reported(stand_ins):
    """A CUDA runtime that raises while counting devices is reported, not raised."""
    broken = stand_ins.devices(error=RuntimeError("CUDA driver version is insufficient"))
    result = plugin.judge_torch_build(stand_ins.torch(cuda="12.4", devices=broken))
    assert not result.ok and "CUDA driver version is insufficient" in result.reason


def test_visible_devices_make_it_available(stand_ins):
    """A CUDA build with devices is available and says how many."""
    result = plugin.judge_torch_build(stand_ins.torch(cuda="12.4", devices=stand_ins.devices(2)))
    assert result.ok and "2 CUDA devices visible" in result.reason


def test_real_probe_on_this_machine():
    """On this machine's torch the probe agrees with torch's own build information."""
    result = plugin.probe()
    if torch.version.cuda is None:
        assert not result.ok and "without CUDA" in result.reason
    else:
        assert result.ok == torch.cuda.is_available()


def _registry_seeing_build(monkeypatch, fake) -> Registry:
    import eagle_hal_rocm.plugin as rocm_plugin

    for module in (plugin, rocm_plugin):
        monkeypatch.setattr(module, "import_torch", lambda: TorchImport(fake))
    return Registry(allow="cuda,rocm", environ={})


@pytest.mark.parametrize(("build", "expected"), [("cuda", "cuda"), ("hip", "rocm")])
def test_cuda_device_goes_to_the_backend_matching_the_build(
    stand_ins, monkeypatch, build, expected
):
    """With the real plugins, 'cuda:0' selects cuda on a CUDA build and rocm on a ROCm build."""
    versions = {"cuda": "12.4"} if build == "cuda" else {"hip": "6.2"}
    fake = stand_ins.torch(devices=stand_ins.devices(1), **versions)
    backend = _registry_seeing_build(monkeypatch, fake).select("cuda:0")
    assert backend.name == expected
    assert backend.torch_device == torch.device("cuda", 0)


def test_backend_reports_its_capabilities():
    """The implementation binds to the device it was given and declares nccl and its variable."""
    backend = CudaBackend(plugin.DESCRIPTOR, parse_device("cuda:1"))
    assert backend.torch_device == torch.device("cuda", 1)
    caps = backend.capabilities
    assert caps.distributed_backend == "nccl" and caps.visible_devices_env == "CUDA_VISIBLE_DEVICES"


def test_backend_hands_out_the_triton_model_kernels():
    """Model kernels between the GEMMs are the shared Triton ones (no device touched)."""
    pytest.importorskip("triton")
    backend = CudaBackend(plugin.DESCRIPTOR, parse_device("cuda:0"))
    assert backend.model_kernels().name == "triton"
