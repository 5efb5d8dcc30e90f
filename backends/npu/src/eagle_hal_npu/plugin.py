"""Entry-point module of the Ascend NPU backend: descriptor and probe, no vendor import at load.

The probe tells apart "torch_npu is not installed", "torch_npu is installed but failed to
import: <message>" (including a failure while ``import torch`` autoloads it) and "no
Ascend NPU visible (ASCEND_RT_VISIBLE_DEVICES=...)". It imports torch_npu, so it runs only
when the registry lists or considers this backend.
"""

from __future__ import annotations

from eagle_hal.backend import Availability, BackendDescriptor, Capabilities, TreeMaskMode
from eagle_hal.hookspecs import hookimpl
from eagle_hal.probing import probe_torch_extension

__all__ = ["CAPABILITIES", "DESCRIPTOR", "EXTENSION", "VISIBLE_DEVICES_ENV", "probe"]

EXTENSION = "torch_npu"
DEVICE_TYPE = "npu"
VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"

CAPABILITIES = Capabilities(
    graph_capture=False,  # eager for now: NPU graphs (with host-side updates) come later
    dtypes=("float32", "bfloat16", "float16"),
    tree_mask_modes=TreeMaskMode.ALL,  # the pure-torch attention reads every layout
    page_sizes=(),
    page_size_multiple=1,
    triton=False,
    distributed_backend="hccl",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    notes="attention: eagle_hal's pure-torch reference until torch_npu's fused attention lands",
)


def probe() -> Availability:
    """Probe torch_npu and the NPU device list; never raises."""
    return probe_torch_extension(
        EXTENSION,
        device_type=DEVICE_TYPE,
        label="Ascend NPU",
        visible_devices_env=VISIBLE_DEVICES_ENV,
        install_hint="install the CANN toolkit and `pip install torch-npu` matching your torch",
    )


DESCRIPTOR = BackendDescriptor(
    name="npu",
    device_types=(DEVICE_TYPE,),
    implementation="eagle_hal_npu.backend:NpuBackend",
    probe=probe,
    api_version=(1, 0),
    priority=100,
    description="Huawei Ascend NPUs through torch_npu",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
