"""Entry-point module of the Intel XPU backend: descriptor and probe, no vendor import at load.

Intel GPUs run through torch's own XPU build (torch >= 2.5 needs no extension). The probe
tells apart "torch was built without XPU" (the vendor runtime is not installed), "XPU
support is installed but failed to initialise: <message>" and "no Intel GPU visible
(ZE_AFFINITY_MASK=...)".
"""

from __future__ import annotations

import importlib.util
from types import ModuleType

from eagle_hal.plugin_api import (
    Availability,
    BackendDescriptor,
    Capabilities,
    TreeMaskMode,
    hookimpl,
    import_torch,
    visible_devices_note,
)

__all__ = ["CAPABILITIES", "DESCRIPTOR", "VISIBLE_DEVICES_ENV", "judge_torch_build", "probe"]

VISIBLE_DEVICES_ENV = "ZE_AFFINITY_MASK"

CAPABILITIES = Capabilities(
    # Nominal: eager. A bound backend turns it on where torch has torch.xpu.XPUGraph (2.11+).
    graph_capture=False,
    asynchronous=True,  # SYCL queues: the host queues work and goes on (off the XPU: False)
    dtypes=("float32", "bfloat16", "float16"),
    tree_mask_modes=(TreeMaskMode.TREE_BLOCK,),  # what the shared Triton attention reads
    page_sizes=(),
    page_size_multiple=1,
    triton=importlib.util.find_spec("triton") is not None,
    distributed_backend="xccl",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    fused_sampling_ops=(
        "build_verify_tree", "masked_argmax", "verify_greedy", "verify_tree_sampling",
        "fill_bonus_tokens", "assign_verify_slots", "draft_kv_slots", "sampling_noise",
    ),
    sliding_window=True,  # windows and soft-caps: the shared attention applies them
    logit_softcap=True,
    notes=(
        "attention and sampling: eagle_hal's shared Triton kernels through Intel's Triton "
        "backend; XPUGraph where torch has it; IPEX not used; never run on Intel hardware"
    ),
)


def _xpu_compiled(torch: ModuleType) -> bool:
    xpu = getattr(torch, "xpu", None)
    is_compiled = getattr(xpu, "_is_compiled", None)
    try:
        return bool(is_compiled()) if is_compiled is not None else False
    except Exception:
        return False


def judge_torch_build(torch: ModuleType) -> Availability:
    """Whether ``torch`` (a module, or a stand-in with the same attributes) runs XPU here.

    Checks that torch was built with XPU, then asks ``torch.xpu`` for devices; never
    raises.
    """
    version = getattr(torch, "__version__", "?")
    if not _xpu_compiled(torch):
        return Availability.unavailable(
            f"torch {version} was built without XPU support, so the Intel GPU runtime is not "
            f"installed; install torch from the PyTorch XPU wheel index"
        )
    try:
        count = int(torch.xpu.device_count()) if torch.xpu.is_available() else 0
    except Exception as exc:
        return Availability.unavailable(
            f"torch's XPU support is installed but failed to initialise: "
            f"{type(exc).__name__}: {exc} (check the Intel GPU driver and Level Zero loader)"
        )
    visible = visible_devices_note(VISIBLE_DEVICES_ENV)
    if count < 1:
        return Availability.unavailable(f"no Intel GPU visible ({visible}); torch {version}")
    return Availability.available(
        f"{count} Intel GPU{'s' if count > 1 else ''} visible ({visible}); torch {version}"
    )


def probe() -> Availability:
    """Import torch (reporting a failed import) and judge its build; never raises."""
    result = import_torch()
    if result.torch is None:
        return Availability.unavailable(result.reason)
    return judge_torch_build(result.torch)


DESCRIPTOR = BackendDescriptor(
    name="xpu",
    device_types=("xpu",),
    implementation="eagle_hal_xpu.backend:XpuBackend",
    probe=probe,
    api_version=(1, 1),
    priority=100,
    description="Intel GPUs through PyTorch's XPU build",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
