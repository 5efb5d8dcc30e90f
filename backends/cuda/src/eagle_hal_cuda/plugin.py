"""Entry-point module of the CUDA backend: descriptor and probe, no vendor import at load.

The probe reads the torch build: a CUDA build with a visible device is available; a ROCm
build is left to the ``rocm`` backend (both serve the torch device type "cuda"); a CPU-only
build and an empty device list say so, naming ``CUDA_VISIBLE_DEVICES``.
"""

from __future__ import annotations

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

VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"

CAPABILITIES = Capabilities(
    graph_capture=True,  # CUDA graphs through the core's graph runner
    asynchronous=True,  # CUDA streams: the host queues work and goes on
    dtypes=("float32", "bfloat16", "float16"),
    tree_mask_modes=(TreeMaskMode.TREE_BLOCK,),  # what the Triton verify kernel reads
    page_sizes=(),  # the kernel reads slots through the request table: any page size
    page_size_multiple=1,
    triton=True,
    distributed_backend="nccl",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    fused_sampling_ops=(
        "build_verify_tree", "masked_argmax", "verify_greedy", "verify_tree_sampling",
        "fill_bonus_tokens", "assign_verify_slots", "draft_kv_slots", "sampling_noise",
    ),
    sliding_window=True,  # windows and soft-caps: the shared attention applies them
    logit_softcap=True,
    notes="attention: eagle_hal's Triton paged attention (ops/triton); FlashInfer not used",
)


def judge_torch_build(torch: ModuleType) -> Availability:
    """Whether ``torch`` (a module, or a stand-in with the same attributes) runs CUDA here.

    Reads ``torch.version.cuda`` / ``torch.version.hip`` and asks ``torch.cuda`` for
    devices; never raises.
    """
    version = getattr(torch, "__version__", "?")
    hip = getattr(torch.version, "hip", None)
    cuda = getattr(torch.version, "cuda", None)
    if hip:
        return Availability.unavailable(
            f"torch {version} is a ROCm build (HIP {hip}), not a CUDA build; "
            f"the 'rocm' backend serves it"
        )
    if not cuda:
        return Availability.unavailable(
            f"torch {version} was built without CUDA; install a CUDA build of torch "
            f"(for example torch from the PyTorch CUDA wheel index)"
        )
    try:
        count = int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except Exception as exc:
        return Availability.unavailable(
            f"the CUDA runtime failed to initialise: {type(exc).__name__}: {exc}"
        )
    visible = visible_devices_note(VISIBLE_DEVICES_ENV)
    if count < 1:
        return Availability.unavailable(
            f"no CUDA device visible ({visible}); torch {version} is built for CUDA {cuda}"
        )
    return Availability.available(
        f"{count} CUDA device{'s' if count > 1 else ''} visible ({visible}); "
        f"torch {version}, CUDA {cuda}"
    )


def probe() -> Availability:
    """Import torch (reporting a failed import) and judge its build; never raises."""
    result = import_torch()
    if result.torch is None:
        return Availability.unavailable(result.reason)
    return judge_torch_build(result.torch)


DESCRIPTOR = BackendDescriptor(
    name="cuda",
    device_types=("cuda",),
    implementation="eagle_hal_cuda.backend:CudaBackend",
    probe=probe,
    api_version=(1, 1),
    priority=100,
    description="NVIDIA GPUs through PyTorch's CUDA build",
    capabilities=CAPABILITIES,
)


@hookimpl
def eagle_hal_backends() -> list[BackendDescriptor]:
    return [DESCRIPTOR]
