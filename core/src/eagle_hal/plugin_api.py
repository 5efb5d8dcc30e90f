"""Everything a backend plugin imports from eagle-hal, in one place.

A backend package (``backends/<vendor>/``, ``examples/third-party-backend/``) imports
eagle-hal only from this module, so the core's module layout can change without breaking
plugins: the names below are the supported surface. They are

* the contract: ``Backend`` and what it is described by (``BackendDescriptor``,
  ``Capabilities``, ``Availability``, ``Tolerances``, ``API_VERSION``, ``TreeMaskMode``),
  the attention, sampling, graph, model-kernel and KV-layout contracts of ``hal/``, the
  device string, the ``hookimpl`` marker and the errors;
* the shared implementations backends build on: the Triton attention and sampling ops,
  the pure-torch reference attention and sampling ops and their helpers, the composite
  attention's pieces, ``FastPathAttention`` (a vendor kernel where it serves, a shared
  backend elsewhere), paging and probing helpers, and ``settings`` (every environment
  variable is read through it).

Importing this module is as cheap as ``import eagle_hal``: each name is imported on first
access (PEP 562 ``__getattr__``), so a plugin's light entry-point module that takes
``hookimpl`` and ``BackendDescriptor`` from here imports no tensors library, and one that
never asks for a Triton name imports no Triton.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Public name -> the module that defines it.
_EXPORTS: dict[str, str] = {
    # the backend contract
    "API_VERSION": "eagle_hal.backend",
    "Availability": "eagle_hal.backend",
    "Backend": "eagle_hal.backend",
    "BackendDescriptor": "eagle_hal.backend",
    "Capabilities": "eagle_hal.backend",
    "SPEC_KINDS": "eagle_hal.backend",
    "Tolerances": "eagle_hal.backend",
    "TreeMaskMode": "eagle_hal.hal.tree_mask",
    "DeviceSpec": "eagle_hal.device",
    "hookimpl": "eagle_hal.hookspecs",
    # attention
    "AttentionBackend": "eagle_hal.hal.attention",
    "AttentionConfig": "eagle_hal.hal.attention",
    "AttentionMetadata": "eagle_hal.hal.attention",
    "ForwardBatch": "eagle_hal.hal.attention",
    "ForwardMode": "eagle_hal.hal.attention",
    "KVStore": "eagle_hal.hal.attention",
    # KV layout
    "KVLayout": "eagle_hal.hal.kv_layout",
    # device graphs
    "DeviceGraph": "eagle_hal.hal.graphs",
    "GraphCapture": "eagle_hal.hal.graphs",
    "ModuleGraph": "eagle_hal.hal.graphs",
    "ModuleGraphCapture": "eagle_hal.hal.graphs",
    "merge_host_updates": "eagle_hal.hal.graphs",
    "no_collection": "eagle_hal.hal.graphs",
    # model kernels
    "FusedLinearKernels": "eagle_hal.hal.model_kernels",
    "ModelKernels": "eagle_hal.hal.model_kernels",
    # sampling
    "ACCEPT_DRAW_LIMIT": "eagle_hal.hal.sampling",
    "NO_NODE": "eagle_hal.hal.sampling",
    "NO_TOKEN": "eagle_hal.hal.sampling",
    "AcceptResult": "eagle_hal.hal.sampling",
    "AcceptedPath": "eagle_hal.hal.sampling",
    "DraftTree": "eagle_hal.hal.sampling",
    "SamplingNoise": "eagle_hal.hal.sampling",
    "SamplingOps": "eagle_hal.hal.sampling",
    "TreeConfigError": "eagle_hal.hal.sampling",
    "TreeShape": "eagle_hal.hal.sampling",
    "TreeStep": "eagle_hal.hal.sampling",
    "VerifyTree": "eagle_hal.hal.sampling",
    # errors
    "BackendConflict": "eagle_hal.errors",
    "BackendUnavailable": "eagle_hal.errors",
    "EagleHalError": "eagle_hal.errors",
    "IncompatibleAPIVersion": "eagle_hal.errors",
    "InvalidDeviceString": "eagle_hal.errors",
    "InvalidSetting": "eagle_hal.errors",
    "PluginLoadError": "eagle_hal.errors",
    # shared implementations: attention
    "FastPathAttention": "eagle_hal.ops.attention_fast_path",
    "TorchAttentionBackend": "eagle_hal.ops.attention_reference",
    "decode_tree_mask": "eagle_hal.ops.attention_reference",
    "gather_kv_slots": "eagle_hal.ops.attention_reference",
    "masked_attention_with_lse": "eagle_hal.ops.attention_composite",
    "merge_attention_states": "eagle_hal.ops.attention_composite",
    "TritonAttentionBackend": "eagle_hal.ops.triton.attention",
    # shared implementations: sampling ops
    "ReferenceSamplingOps": "eagle_hal.ops.reference",
    "TritonSamplingOps": "eagle_hal.ops.triton.ops",
    # paging
    "page_table": "eagle_hal.ops.paging",
    "paged_view": "eagle_hal.ops.paging",
    # probing
    "OptInLibrary": "eagle_hal.probing",
    "TorchImport": "eagle_hal.probing",
    "import_torch": "eagle_hal.probing",
    "probe_torch_extension": "eagle_hal.probing",
    "visible_devices_note": "eagle_hal.probing",
}

# Modules exported whole.
_MODULES: dict[str, str] = {
    "settings": "eagle_hal.settings",
}

__all__ = sorted([*_EXPORTS, *_MODULES])

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only (exported above)
    from eagle_hal import settings  # noqa: F401
    from eagle_hal.backend import (  # noqa: F401
        API_VERSION,
        SPEC_KINDS,
        Availability,
        Backend,
        BackendDescriptor,
        Capabilities,
        Tolerances,
    )
    from eagle_hal.device import DeviceSpec  # noqa: F401
    from eagle_hal.errors import (  # noqa: F401
        BackendConflict,
        BackendUnavailable,
        EagleHalError,
        IncompatibleAPIVersion,
        InvalidDeviceString,
        InvalidSetting,
        PluginLoadError,
    )
    from eagle_hal.hal.attention import (  # noqa: F401
        AttentionBackend,
        AttentionConfig,
        AttentionMetadata,
        ForwardBatch,
        ForwardMode,
        KVStore,
    )
    from eagle_hal.hal.graphs import (  # noqa: F401
        DeviceGraph,
        GraphCapture,
        ModuleGraph,
        ModuleGraphCapture,
        merge_host_updates,
        no_collection,
    )
    from eagle_hal.hal.kv_layout import KVLayout  # noqa: F401
    from eagle_hal.hal.model_kernels import FusedLinearKernels, ModelKernels  # noqa: F401
    from eagle_hal.hal.sampling import (  # noqa: F401
        ACCEPT_DRAW_LIMIT,
        NO_NODE,
        NO_TOKEN,
        AcceptedPath,
        AcceptResult,
        DraftTree,
        SamplingNoise,
        SamplingOps,
        TreeConfigError,
        TreeShape,
        TreeStep,
        VerifyTree,
    )
    from eagle_hal.hal.tree_mask import TreeMaskMode  # noqa: F401
    from eagle_hal.hookspecs import hookimpl  # noqa: F401
    from eagle_hal.ops.attention_composite import (  # noqa: F401
        masked_attention_with_lse,
        merge_attention_states,
    )
    from eagle_hal.ops.attention_fast_path import FastPathAttention  # noqa: F401
    from eagle_hal.ops.attention_reference import (  # noqa: F401
        TorchAttentionBackend,
        decode_tree_mask,
        gather_kv_slots,
    )
    from eagle_hal.ops.paging import page_table, paged_view  # noqa: F401
    from eagle_hal.ops.reference import ReferenceSamplingOps  # noqa: F401
    from eagle_hal.ops.triton.attention import TritonAttentionBackend  # noqa: F401
    from eagle_hal.ops.triton.ops import TritonSamplingOps  # noqa: F401
    from eagle_hal.probing import (  # noqa: F401
        OptInLibrary,
        TorchImport,
        import_torch,
        probe_torch_extension,
        visible_devices_note,
    )


def __getattr__(name: str) -> Any:
    if name in _MODULES:
        value = importlib.import_module(_MODULES[name])
    elif name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
    else:
        raise AttributeError(f"module 'eagle_hal.plugin_api' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
