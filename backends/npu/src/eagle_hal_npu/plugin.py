"""Entry-point module of the Ascend NPU backend: descriptor and probe, no vendor import at load.

The probe tells apart "torch_npu is not installed", "torch_npu <v> is built for torch <w>"
(the two are released in pairs: torch_npu X.Y.Z[.postN] runs on torch X.Y.Z only),
"torch_npu is installed but failed to import: <message>" (including a failure while
``import torch`` autoloads it; a missing CANN toolkit, seen as ``libhccl.so`` /
``libascendcl.so`` not found or error ``ERR00008``, is named as such) and "no Ascend NPU
visible (ASCEND_RT_VISIBLE_DEVICES=...)". It imports torch_npu, so it runs only when the
registry lists or considers this backend.
"""

from __future__ import annotations

import re
from importlib import metadata

from eagle_hal.plugin_api import (
    Availability,
    BackendDescriptor,
    Capabilities,
    TreeMaskMode,
    hookimpl,
    import_torch,
    probe_torch_extension,
)

__all__ = [
    "CAPABILITIES",
    "DESCRIPTOR",
    "EXTENSION",
    "VISIBLE_DEVICES_ENV",
    "explain_import_failure",
    "probe",
    "version_mismatch",
]

EXTENSION = "torch_npu"
DEVICE_TYPE = "npu"
VISIBLE_DEVICES_ENV = "ASCEND_RT_VISIBLE_DEVICES"

CAPABILITIES = Capabilities(
    # NPUGraph capture; replays refresh the fused attention's host lengths through
    # NPUGraph.update (NpuAttentionBackend.replay_host_updates). Off the NPU: False.
    graph_capture=True,
    asynchronous=True,  # NPU streams: the host queues work and goes on (off the NPU: False)
    dtypes=("bfloat16", "float16"),  # what npu_fused_infer_attention_score computes in
    tree_mask_modes=(TreeMaskMode.TREE_BLOCK,),
    page_sizes=(128,),  # the fused operator's block size for multi-token queries
    page_size_multiple=1,
    triton=False,
    distributed_backend="hccl",
    visible_devices_env=VISIBLE_DEVICES_ENV,
    notes=(
        "attention: npu_fused_infer_attention_score over a paged cache; tree verify and "
        "draft decode through the LSE-merge composite; KV writes via _npu_reshape_and_cache "
        "(int32 slots); never run on Ascend hardware"
    ),
)

_INSTALL_HINT = "install the CANN toolkit and `pip install torch-npu` matching your torch"
_CANN_MARKERS = ("libhccl.so", "libascendcl.so", "ERR00008")
_RELEASE = re.compile(r"^(\d+)\.(\d+)\.(\d+)")


def version_mismatch(torch_version: str, torch_npu_version: str) -> str | None:
    """Why ``torch_npu_version`` cannot run on ``torch_version``, or ``None`` if they pair.

    torch_npu X.Y.Z (and its .postN / rcN builds) is built for torch X.Y.Z; local suffixes
    (``+cpu``) are ignored. Unparseable versions are not judged.
    """
    ours, theirs = _RELEASE.match(torch_npu_version), _RELEASE.match(torch_version)
    if ours is None or theirs is None or ours.groups() == theirs.groups():
        return None
    wanted = ".".join(ours.groups())
    return (
        f"torch_npu {torch_npu_version} is built for torch {wanted}, but torch is "
        f"{torch_version}; install the torch-npu release for torch "
        f"{'.'.join(theirs.groups())} (or torch=={wanted})"
    )


def explain_import_failure(reason: str) -> str:
    """``reason`` plus what to do when it is the signature of a missing CANN toolkit."""
    if any(marker in reason for marker in _CANN_MARKERS):
        return (
            f"{reason} (the CANN toolkit was not found: install it and `source "
            f"<CANN install dir>/set_env.sh`, for instance "
            f"/usr/local/Ascend/ascend-toolkit/set_env.sh, before starting Python)"
        )
    return reason


def _installed_version() -> str | None:
    try:
        return metadata.version(EXTENSION)
    except Exception:  # not installed as a distribution (or broken metadata): not judged
        return None


def probe() -> Availability:
    """Probe torch, the torch/torch_npu pairing, torch_npu and the NPU device list; never
    raises."""
    torch_import = import_torch()
    if torch_import.torch is not None:
        npu_version = _installed_version()
        if npu_version is not None:
            mismatch = version_mismatch(str(torch_import.torch.__version__), npu_version)
            if mismatch is not None:
                return Availability.unavailable(mismatch)
    result = probe_torch_extension(
        EXTENSION,
        device_type=DEVICE_TYPE,
        label="Ascend NPU",
        visible_devices_env=VISIBLE_DEVICES_ENV,
        install_hint=_INSTALL_HINT,
    )
    if result.ok:
        return result
    return Availability.unavailable(explain_import_failure(result.reason))


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
