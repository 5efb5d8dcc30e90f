"""eagle-hal: EAGLE speculative decoding on any accelerator.

``import eagle_hal`` is cheap: it imports no tensors library and discovers no plugins.
The public names below are imported on first access (PEP 562 module ``__getattr__``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from eagle_hal._version import __version__

# Public name -> the module that defines it; add a line here to export a new name.
_LAZY_EXPORTS: dict[str, str] = {
    # backend selection
    "select_backend": "eagle_hal.registry",
    "list_backends": "eagle_hal.registry",
    "Registry": "eagle_hal.registry",
    "BackendInfo": "eagle_hal.registry",
    "parse_device": "eagle_hal.device",
    "DeviceSpec": "eagle_hal.device",
    # the backend contract
    "API_VERSION": "eagle_hal.backend",
    "Availability": "eagle_hal.backend",
    "Backend": "eagle_hal.backend",
    "BackendDescriptor": "eagle_hal.backend",
    "Capabilities": "eagle_hal.backend",
    "TreeMaskMode": "eagle_hal.hal.tree_mask",
    "hookimpl": "eagle_hal.hookspecs",
    # errors
    "EagleHalError": "eagle_hal.errors",
    "InvalidDeviceString": "eagle_hal.errors",
    "BackendUnavailable": "eagle_hal.errors",
    "PluginLoadError": "eagle_hal.errors",
    "BackendConflict": "eagle_hal.errors",
    "IncompatibleAPIVersion": "eagle_hal.errors",
    # generation
    "LLM": "eagle_hal.api",
    "PromptTooLong": "eagle_hal.api",
    "SamplingParams": "eagle_hal.engine.request",
    "RequestOutput": "eagle_hal.engine.request",
    "SpecConfig": "eagle_hal.speculative.config",
}

__all__ = ["__version__", *_LAZY_EXPORTS]

if TYPE_CHECKING:  # pragma: no cover - for type checkers and IDEs only (exported above)
    from eagle_hal.api import LLM, PromptTooLong  # noqa: F401
    from eagle_hal.backend import (  # noqa: F401
        API_VERSION,
        Availability,
        Backend,
        BackendDescriptor,
        Capabilities,
    )
    from eagle_hal.device import DeviceSpec, parse_device  # noqa: F401
    from eagle_hal.engine.request import RequestOutput, SamplingParams  # noqa: F401
    from eagle_hal.errors import (  # noqa: F401
        BackendConflict,
        BackendUnavailable,
        EagleHalError,
        IncompatibleAPIVersion,
        InvalidDeviceString,
        PluginLoadError,
    )
    from eagle_hal.hal.tree_mask import TreeMaskMode  # noqa: F401
    from eagle_hal.hookspecs import hookimpl  # noqa: F401
    from eagle_hal.registry import BackendInfo, Registry, list_backends, select_backend  # noqa: F401
    from eagle_hal.speculative.config import SpecConfig  # noqa: F401


def __getattr__(name: str) -> Any:
    module = _LAZY_EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'eagle_hal' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY_EXPORTS))
