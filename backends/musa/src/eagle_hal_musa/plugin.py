"""Entry-point module of the MUSA backend: descriptor and probe, no vendor import at load.

The probe tells apart "torch_musa is not installed", "torch_musa is installed but failed to
import: <message>" (including a failure while ``import torch`` autoloads it) and "no
Moore Threads GPU visible (MUSA_VISIBLE_DEVICES=...)". It imports torch_musa, so it runs only
when the registry lists or considers this backend.
"""

from __future__ import annotations

from eagle_hal.plugin_api import (
    Availability,
    BackendDescriptor,
    Capabilities,
    TreeMaskMode,
    hookimpl,
    probe_torch_extension,
)

from eagle_hal_musa.mate_support import probe_note

__all__ = ["CAPABILITIES", "DESCRIPTOR", "EXTENSION", "VISIBLE_DEVICES_ENV", "probe"]

EXTENSION = "torch_musa"
DEVICE_TYPE = "musa"
VISIBLE_DEVICES_ENV = "MUSA_VISIBLE_DEVICES"

CAPABILITIES = Capabilities(
    graph_capture=True,  # torch.musa.MUSAGraph (eagle_hal_musa.graphs)
    asynchronous=True,  # MUSA streams: the host queues work and goes on (off the GPU: False)
    dtypes=("float32", "bfloat16", "float16"),
    tree_mask_modes=TreeMaskMode.ALL,  # the pure-torch attention reads every layout
    page_sizes=(),
    page_size_multiple=1,
    triton=False,
    distributed_backend="mccl",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    sliding_window=True,  # windows and soft-caps: the shared attention applies them
    logit_softcap=True,
    notes=(
        "attention: torch SDPA over gathered slots (eagle_hal's reference attention); mate's "
        "paged flash attention for the causal modes only when opted in with "
        "EAGLE_HAL_MUSA_MATE=1 (checked against an emulation only); reference sampling ops; "
        "never run on Moore Threads hardware"
    ),
)


def probe() -> Availability:
    """Probe torch_musa and the MUSA device list (and, when available, say whether mate's
    flash attention is on, without importing mate); never raises."""
    result = probe_torch_extension(
        EXTENSION,
        device_type=DEVICE_TYPE,
        label="Moore Threads GPU",
        visible_devices_env=VISIBLE_DEVICES_ENV,
        install_hint="install the MUSA toolkit and the torch_musa wheel matching your torch",
    )
    if not result.ok:
        return result
    return Availability.available(f"{result.reason}; {probe_note()}")


DESCRIPTOR = BackendDescriptor(
    name="musa",
    device_types=(DEVICE_TYPE,),
    implementation="eagle_hal_musa.backend:MusaBackend",
    probe=probe,
    api_version=(1, 1),
    priority=100,
    description="Moore Threads GPUs through torch_musa",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
