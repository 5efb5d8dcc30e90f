"""The Ascend NPU backend implementation, imported only when the backend is selected."""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, BackendDescriptor, Capabilities, DeviceSpec, KVLayout

from eagle_hal_npu.glue import MULTI_TOKEN_BLOCK_SIZE
from eagle_hal_npu.plugin import CAPABILITIES, DEVICE_TYPE, EXTENSION

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch
    from eagle_hal.plugin_api import AttentionBackend, AttentionConfig, GraphCapture

    from eagle_hal_npu.ops import NpuOps

__all__ = ["NpuBackend"]


class NpuBackend(Backend):
    """Ascend NPUs: torch_npu's fused paged attention, int32 slots, 128-slot pages, NPU graphs.

    ``ops`` replaces torch_npu's operators (tests pass emulations of them). A backend bound
    to a device other than ``npu`` (the CPU, in tests) neither imports torch_npu nor offers
    graph capture; its attention runs through ``ops``.
    """

    def __init__(
        self, descriptor: BackendDescriptor, device: DeviceSpec, *, ops: NpuOps | None = None
    ) -> None:
        super().__init__(descriptor, device)
        self._ops = ops
        self._on_npu = device.torch_device_string.split(":")[0] == DEVICE_TYPE
        if self._on_npu:
            # torch knows the "npu" device type only once the extension is imported (torch's
            # autoload usually did it already; with TORCH_DEVICE_BACKEND_AUTOLOAD=0 it did not).
            importlib.import_module(EXTENSION)

    @property
    def capabilities(self) -> Capabilities:
        if self._on_npu:
            return CAPABILITIES
        return dataclasses.replace(CAPABILITIES, graph_capture=False, asynchronous=False)

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def kv_layout(self) -> KVLayout:
        """NHD storage, 128-slot pages (the fused operator's multi-token block size),
        int32 slots."""
        return KVLayout(order="NHD", page_size=MULTI_TOKEN_BLOCK_SIZE, slot_dtype="int32")

    def ops(self) -> NpuOps:
        """The operators attention calls: those given, else torch_npu's."""
        if self._ops is None:
            from eagle_hal_npu.ops import NpuOps

            self._ops = NpuOps.from_torch_npu(importlib.import_module(EXTENSION))
        return self._ops

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """An ``NpuAttentionBackend`` (fused paged attention, composite tree verify)."""
        from eagle_hal_npu.attention import NpuAttentionBackend

        return NpuAttentionBackend(config, self.ops())

    def graph_capture(self) -> GraphCapture | None:
        """``NPUGraph`` capture with host-side updates; ``None`` off the NPU."""
        if not self._on_npu:
            return None
        import torch

        from eagle_hal_npu.graphs import NpuGraphCapture

        return NpuGraphCapture(torch.get_device_module(DEVICE_TYPE))
