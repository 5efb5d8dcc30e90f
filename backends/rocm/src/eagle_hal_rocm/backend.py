"""The ROCm backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import dataclasses
import importlib.util
import warnings
from types import SimpleNamespace
from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, BackendDescriptor, Capabilities, DeviceSpec, settings

from eagle_hal_rocm.aiter_support import AiterChoice, aiter_requested, resolve_aiter
from eagle_hal_rocm.plugin import CAPABILITIES
from eagle_hal_rocm.wavefront import TritonLaunchParams, device_wavefront_size, launch_params

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.plugin_api import AttentionBackend, AttentionConfig, GraphCapture, SamplingOps

__all__ = ["RocmBackend"]

_GPU_TYPE = "cuda"  # PyTorch's ROCm builds call the GPU device type "cuda"


class RocmBackend(Backend):
    """AMD GPUs (torch device type "cuda" on ROCm builds): the shared Triton attention and
    sampling kernels launched for the GPU's wavefront size, HIP graphs, and, opted in with
    ``EAGLE_HAL_ROCM_AITER=1``, aiter's paged attention for decode
    (``eagle_hal_rocm.attention_aiter``; the conditions are in ``aiter_support``).

    ``wavefront_size`` overrides what the device reports (tests; forcing CDNA launch
    parameters on another GPU). Bound to the CPU (tests), the Triton paths run only under
    ``TRITON_INTERPRET=1`` and the pure-torch ones otherwise; no graphs.
    """

    def __init__(
        self,
        descriptor: BackendDescriptor,
        device: DeviceSpec,
        *,
        wavefront_size: int | None = None,
    ) -> None:
        super().__init__(descriptor, device)
        self._wavefront_size = wavefront_size
        self._on_gpu = device.torch_device_string.split(":")[0] == _GPU_TYPE
        self._aiter: AiterChoice | None = None

    @property
    def capabilities(self) -> Capabilities:
        aiter = self.aiter_choice().reason
        if not self._uses_triton():
            return dataclasses.replace(
                CAPABILITIES, graph_capture=False, triton=False, fused_sampling_ops=(),
                asynchronous=self._on_gpu,
                notes="bound off the GPU without TRITON_INTERPRET=1: pure-torch paths; "
                + aiter.replace("shared Triton kernel", "pure-torch reference"),
            )
        notes = f"{CAPABILITIES.notes}; {aiter}"
        if self._on_gpu:
            return dataclasses.replace(CAPABILITIES, notes=notes)
        return dataclasses.replace(CAPABILITIES, graph_capture=False, asynchronous=False,
                                   notes=notes)

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def wavefront_size(self) -> int:
        """The override, else what the bound GPU reports, else 64 off the GPU (CDNA)."""
        if self._wavefront_size is None:
            if self._on_gpu:
                import torch

                properties = torch.get_device_module(_GPU_TYPE).get_device_properties(
                    self.torch_device
                )
                self._wavefront_size = device_wavefront_size(properties)
            else:  # the CDNA default, unless EAGLE_HAL_ROCM_WAVEFRONT_SIZE says otherwise
                self._wavefront_size = device_wavefront_size(SimpleNamespace(warp_size=64))
        return self._wavefront_size

    def launch_params(self) -> TritonLaunchParams:
        return launch_params(self.wavefront_size())

    def aiter_choice(self) -> AiterChoice:
        """Whether decode goes through aiter's ``paged_attention_v1`` and why (decided once
        per backend; see ``aiter_support``). Warns when aiter was asked for with
        ``EAGLE_HAL_ROCM_AITER=1`` but cannot be used."""
        if self._aiter is None:
            arch = None
            if self._on_gpu and aiter_requested():  # only then touch the GPU
                import torch

                try:
                    properties = torch.get_device_module(_GPU_TYPE).get_device_properties(
                        self.torch_device
                    )
                    arch = str(getattr(properties, "gcnArchName", "") or "an unnamed GPU")
                except Exception as exc:
                    arch = f"an unreadable architecture ({type(exc).__name__}: {exc})"
            self._aiter = resolve_aiter(arch)
            if self._aiter.paged_attention_v1 is None and aiter_requested():
                warnings.warn(self._aiter.reason, RuntimeWarning, stacklevel=2)
        return self._aiter

    def library_versions(self) -> dict[str, str]:
        """aiter's version when its paged decode is in use."""
        choice = self.aiter_choice()
        if choice.paged_attention_v1 is None or choice.version is None:
            return {}
        return {"aiter": choice.version}

    def _uses_triton(self) -> bool:
        if importlib.util.find_spec("triton") is None:
            return False
        return self._on_gpu or settings.triton_interpreted()

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """The shared ``TritonAttentionBackend`` (the pure-torch reference off the GPU
        without the Triton interpreter), wrapped by ``AiterDecodeAttention`` when aiter is
        in use and the model's geometry suits its paged decode."""
        shared = self._shared_attention(config)
        op = self.aiter_choice().paged_attention_v1
        if op is None:
            return shared
        from eagle_hal_rocm.attention_aiter import AiterDecodeAttention, decode_geometry_problem

        if decode_geometry_problem(config) is not None:
            return shared
        return AiterDecodeAttention(config, op, shared)

    def _shared_attention(self, config: AttentionConfig) -> AttentionBackend:
        if self._uses_triton():
            from eagle_hal.plugin_api import TritonAttentionBackend

            return TritonAttentionBackend(config)
        from eagle_hal.plugin_api import TorchAttentionBackend

        return TorchAttentionBackend(config)

    def sampling_ops(self) -> SamplingOps:
        """``TritonSamplingOps`` with wavefront-derived launch parameters (its argmax is the
        masked split-vocabulary one: columns at or past ``vocab_size`` are never read)."""
        if self._uses_triton():
            from eagle_hal.plugin_api import TritonSamplingOps

            return TritonSamplingOps(**self.launch_params().as_kwargs())
        return super().sampling_ops()

    def graph_capture(self) -> GraphCapture | None:
        """HIP graphs through the CUDA-graph API; ``None`` off the GPU."""
        if not self._on_gpu:
            return None
        import torch

        from eagle_hal_rocm.graphs import HipGraphCapture

        return HipGraphCapture(torch.get_device_module(_GPU_TYPE))
