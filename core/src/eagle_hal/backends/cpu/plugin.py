"""The CPU reference backend's plugin module: its descriptor and probe.

Registered through the same ``eagle_hal.backends`` entry point as every vendor plugin
(``cpu = "eagle_hal.backends.cpu.plugin"`` in core's pyproject). Importing this module
imports no tensors library; the probe imports torch.
"""

from __future__ import annotations

import os

from eagle_hal.backend import Availability, BackendDescriptor, Capabilities
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.hookspecs import hookimpl
from eagle_hal.probing import import_torch

__all__ = ["CAPABILITIES", "DESCRIPTOR", "eagle_hal_backends", "probe"]

CAPABILITIES = Capabilities(
    graph_capture=False,
    asynchronous=False,  # torch's CPU ops finish before they return
    dtypes=("float32", "bfloat16"),
    tree_mask_modes=TreeMaskMode.ALL,
    page_sizes=(),
    page_size_multiple=1,
    triton=False,
    distributed_backend="gloo",
    visible_devices_env=None,
    sliding_window=True,  # windows and soft-caps: the shared attention applies them
    logit_softcap=True,
    notes="pure-torch reference implementation of the whole HAL contract",
)


def probe() -> Availability:
    """Available wherever torch imports; otherwise says why it does not."""
    result = import_torch()
    if result.torch is None:
        return Availability.unavailable(result.reason)
    return Availability.available(
        f"torch {result.torch.__version__}, {os.cpu_count() or 1} CPU cores"
    )


DESCRIPTOR = BackendDescriptor(
    name="cpu",
    device_types=("cpu",),
    implementation="eagle_hal.backends.cpu.backend:CpuBackend",
    probe=probe,
    api_version=(1, 1),
    priority=0,
    description="reference backend: pure torch on the CPU",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
