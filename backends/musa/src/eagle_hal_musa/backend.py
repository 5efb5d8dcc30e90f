"""The MUSA backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import dataclasses
import importlib
import warnings
from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, BackendDescriptor, Capabilities, DeviceSpec

from eagle_hal_musa.mate_support import MateChoice, mate_requested, resolve_mate
from eagle_hal_musa.plugin import CAPABILITIES, DEVICE_TYPE, EXTENSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.plugin_api import AttentionBackend, AttentionConfig, GraphCapture

__all__ = ["MusaBackend"]


class MusaBackend(Backend):
    """Moore Threads GPUs through torch_musa (device ``musa``, a PrivateUse1 backend):
    attention through torch's SDPA (the pure-torch reference backend) and, opted in with
    ``EAGLE_HAL_MUSA_MATE=1``, mate's paged flash attention for the causal modes
    (``eagle_hal_musa.attention_mate``; conditions in ``mate_support``); reference sampling
    ops, ``MUSAGraph`` capture. Bound to another device (the CPU, in tests) it neither
    imports torch_musa nor offers graphs.
    """

    def __init__(self, descriptor: BackendDescriptor, device: DeviceSpec) -> None:
        super().__init__(descriptor, device)
        self._on_musa = device.torch_device_string.split(":")[0] == DEVICE_TYPE
        self._mate: MateChoice | None = None
        if self._on_musa:
            # torch knows the "musa" device type only once the extension is imported (torch's
            # autoload usually did it already; with TORCH_DEVICE_BACKEND_AUTOLOAD=0 it did not).
            importlib.import_module(EXTENSION)

    @property
    def capabilities(self) -> Capabilities:
        notes = f"{CAPABILITIES.notes}; {self.mate_choice().reason}"
        if self._on_musa:
            return dataclasses.replace(CAPABILITIES, notes=notes)
        return dataclasses.replace(CAPABILITIES, graph_capture=False, asynchronous=False,
                                   notes=notes)

    def mate_choice(self) -> MateChoice:
        """Whether causal attention goes through mate's ``flash_attn_with_kvcache`` and why
        (decided once per backend; see ``mate_support``). Warns when mate was asked for
        with ``EAGLE_HAL_MUSA_MATE=1`` but cannot be used."""
        if self._mate is None:
            capability = None
            if self._on_musa and mate_requested():  # only then touch the GPU
                import torch

                try:
                    capability = tuple(torch.get_device_module(DEVICE_TYPE)
                                       .get_device_capability(self.torch_device))
                except Exception:
                    capability = (0, 0)  # unreadable: reported as not MP31
            self._mate = resolve_mate(capability)
            if self._mate.flash_attn_with_kvcache is None and mate_requested():
                warnings.warn(self._mate.reason, RuntimeWarning, stacklevel=2)
        return self._mate

    def library_versions(self) -> dict[str, str]:
        """mate's version when its flash attention is in use."""
        choice = self.mate_choice()
        if choice.flash_attn_with_kvcache is None or choice.version is None:
            return {}
        return {"mate": choice.version}

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """``TorchAttentionBackend`` (slot gathers and torch's SDPA, which torch_musa
        implements), wrapped by ``MateCausalAttention`` when mate is in use and the model's
        geometry suits it."""
        from eagle_hal.plugin_api import TorchAttentionBackend

        sdpa = TorchAttentionBackend(config)
        op = self.mate_choice().flash_attn_with_kvcache
        if op is None:
            return sdpa
        from eagle_hal_musa.attention_mate import MateCausalAttention, causal_geometry_problem

        if causal_geometry_problem(config) is not None:
            return sdpa
        return MateCausalAttention(config, op, sdpa)

    def graph_capture(self) -> GraphCapture | None:
        """``MUSAGraph`` capture; ``None`` off the MUSA device."""
        if not self._on_musa:
            return None
        import torch

        from eagle_hal_musa.graphs import MusaGraphCapture

        return MusaGraphCapture(torch.get_device_module(DEVICE_TYPE))
