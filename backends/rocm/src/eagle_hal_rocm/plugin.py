"""Entry-point module of the ROCm backend: descriptor and probe, no vendor import at load.

PyTorch's ROCm builds call the device type "cuda", so this backend serves ``cuda[:N]``
alongside the CUDA backend, plus the aliases ``rocm[:N]`` and ``hip[:N]`` that it alone
answers to. Its probe reads the torch build (``torch.version.hip``), so on a CUDA build it
is unavailable and the CUDA backend serves ``cuda``; its higher priority makes it win on
a ROCm build should both ever report available.
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
    settings,
    visible_devices_note,
)

from eagle_hal_rocm.aiter_support import probe_note

__all__ = ["CAPABILITIES", "DESCRIPTOR", "VISIBLE_DEVICES_ENV", "judge_torch_build", "probe"]

VISIBLE_DEVICES_ENV = "HIP_VISIBLE_DEVICES"
# ROCm also honours these; a probe that finds no device names whichever are set.
_OTHER_VISIBILITY_ENVS = ("ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")

CAPABILITIES = Capabilities(
    graph_capture=True,  # HIP graphs through torch.cuda.CUDAGraph (eagle_hal_rocm.graphs)
    asynchronous=True,  # HIP streams: the host queues work and goes on (off the GPU: False)
    dtypes=("float32", "bfloat16", "float16"),
    tree_mask_modes=(TreeMaskMode.TREE_BLOCK,),  # what the shared Triton attention reads
    page_sizes=(),
    page_size_multiple=1,
    triton=importlib.util.find_spec("triton") is not None,
    distributed_backend="nccl",  # RCCL, under torch.distributed's name "nccl"
    visible_devices_env=VISIBLE_DEVICES_ENV,
    fused_sampling_ops=(
        "build_verify_tree", "masked_argmax", "verify_greedy", "verify_tree_sampling",
        "fill_bonus_tokens", "assign_verify_slots", "draft_kv_slots", "sampling_noise",
    ),
    sliding_window=True,  # windows and soft-caps: the shared attention applies them
    logit_softcap=True,
    notes=(
        "attention and sampling: eagle_hal's shared Triton kernels, sampling launched for the "
        "GPU's wavefront size (64 on CDNA, 32 on RDNA); decode through aiter's "
        "paged_attention_v1 only when opted in with EAGLE_HAL_ROCM_AITER=1 (checked against "
        "an emulation only); never run on AMD hardware"
    ),
)


def _visibility() -> str:
    notes = [visible_devices_note(VISIBLE_DEVICES_ENV)]
    notes += [visible_devices_note(var) for var in _OTHER_VISIBILITY_ENVS
              if settings.get(var) is not None]
    return ", ".join(notes)


def judge_torch_build(torch: ModuleType) -> Availability:
    """Whether ``torch`` (a module, or a stand-in with the same attributes) runs ROCm here.

    Reads ``torch.version.hip`` and asks ``torch.cuda`` (which is HIP on ROCm builds) for
    devices; never raises.
    """
    version = getattr(torch, "__version__", "?")
    hip = getattr(torch.version, "hip", None)
    if not hip:
        built_for = "CUDA" if getattr(torch.version, "cuda", None) else "the CPU only"
        return Availability.unavailable(
            f"torch {version} is not a ROCm build (it is built for {built_for}); install "
            f"torch from the PyTorch ROCm wheel index"
        )
    try:
        count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception as exc:
        return Availability.unavailable(
            f"the ROCm (HIP) runtime failed to initialise: {type(exc).__name__}: {exc}"
        )
    if count < 1:
        return Availability.unavailable(
            f"no AMD GPU visible ({_visibility()}); torch {version} is built for HIP {hip}"
        )
    return Availability.available(
        f"{count} AMD GPU{'s' if count > 1 else ''} visible ({_visibility()}); "
        f"torch {version}, HIP {hip}; {probe_note()}"
    )


def probe() -> Availability:
    """Import torch (reporting a failed import) and judge its build; never raises."""
    result = import_torch()
    if result.torch is None:
        return Availability.unavailable(result.reason)
    return judge_torch_build(result.torch)


DESCRIPTOR = BackendDescriptor(
    name="rocm",
    device_types=("rocm", "hip", "cuda"),
    implementation="eagle_hal_rocm.backend:RocmBackend",
    probe=probe,
    api_version=(1, 1),
    priority=110,  # above the CUDA backend's 100: on a ROCm build, rocm serves "cuda"
    description="AMD GPUs through PyTorch's ROCm build",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
