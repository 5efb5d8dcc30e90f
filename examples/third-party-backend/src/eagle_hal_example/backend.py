"""The example backend's implementation, imported only when it is selected."""

from __future__ import annotations

from typing import TYPE_CHECKING

from eagle_hal.plugin_api import Backend, Capabilities, TreeMaskMode

from eagle_hal_example.plugin import CAPABILITIES

if TYPE_CHECKING:
    import torch
    from eagle_hal.plugin_api import AttentionBackend, AttentionConfig


class ExampleBackend(Backend):
    """Runs on the host with eagle-hal's pure-torch attention, asking for tree-block masks."""

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        # A real vendor returns its own AttentionBackend here; the reference is a public
        # building block any plugin may reuse.
        from eagle_hal.plugin_api import TorchAttentionBackend

        return TorchAttentionBackend(config, tree_mask_mode=TreeMaskMode.TREE_BLOCK)
