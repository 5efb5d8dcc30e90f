"""Device strings: what a user writes to choose where eagle-hal runs.

Accepted forms (``N`` is a device index)::

    cpu | cpu:0          the CPU (there is one CPU device, so only index 0)
    cuda[:N]             an NVIDIA GPU through PyTorch's CUDA device type
    rocm[:N] | hip[:N]   an AMD GPU; PyTorch's ROCm builds call the device type "cuda",
                         so these select the torch type "cuda" but only ROCm-capable backends
    npu[:N]              an Ascend NPU
    xpu[:N]              an Intel GPU
    musa[:N]             a Moore Threads GPU
    auto                 the best available accelerator, else the CPU (no index)

Rules: surrounding whitespace is ignored and the kind is case-insensitive (``" CUDA:1 "``
is ``cuda:1``); nothing else is tolerated. ``N`` is plain decimal without sign or leading
zeros and is below ``MAX_DEVICE_INDEX``. Installed plugins may serve further device types;
the registry passes their names as ``extra_kinds`` and they accept ``kind[:N]`` too.

This module imports no tensors library.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from eagle_hal.errors import InvalidDeviceString

__all__ = [
    "ACCEPTED_FORMS",
    "AUTO",
    "DeviceSpec",
    "KIND_TO_TORCH_TYPE",
    "MAX_DEVICE_INDEX",
    "parse_device",
]

AUTO = "auto"

# Device indices at or above this are rejected as typos; no host has that many devices.
MAX_DEVICE_INDEX = 1024

# Device kind as written by the user -> the torch device type tensors live on.
KIND_TO_TORCH_TYPE: dict[str, str] = {
    "cpu": "cpu",
    "cuda": "cuda",
    "rocm": "cuda",
    "hip": "cuda",
    "npu": "npu",
    "xpu": "xpu",
    "musa": "musa",
}

# Kinds that have a single device, so accept no index but 0.
_SINGLE_DEVICE_KINDS = frozenset({"cpu"})

ACCEPTED_FORMS = (
    "cpu",
    "cpu:0",
    "cuda[:N]",
    "rocm[:N]",
    "hip[:N]",
    "npu[:N]",
    "xpu[:N]",
    "musa[:N]",
    "auto",
)

_KIND = r"[a-z][a-z0-9_]*"
_INDEX = r"0|[1-9][0-9]*"
_DEVICE_RE = re.compile(rf"(?P<kind>{_KIND})(?::(?P<index>{_INDEX}))?")


@dataclasses.dataclass(frozen=True, slots=True)
class DeviceSpec:
    """A parsed device string.

    ``kind`` is the kind as the user wrote it (lower-cased), e.g. ``"rocm"``;
    ``torch_type`` is the torch device type it maps to, e.g. ``"cuda"``, and is ``None``
    only for ``auto``, which the registry resolves to a concrete spec; ``index`` is the
    device index, or ``None`` when the user gave none (the backend's current device).
    """

    kind: str
    torch_type: str | None
    index: int | None = None

    def __post_init__(self) -> None:
        if self.index is not None and not 0 <= self.index < MAX_DEVICE_INDEX:
            raise InvalidDeviceString(
                f"device index {self.index} is out of range [0, {MAX_DEVICE_INDEX})"
            )
        if (self.kind == AUTO) != (self.torch_type is None):
            raise ValueError("only the 'auto' device spec has no torch device type")

    @property
    def is_auto(self) -> bool:
        return self.kind == AUTO

    @property
    def torch_device_string(self) -> str:
        """What ``torch.device`` accepts, e.g. ``"cuda:0"`` for ``rocm:0``."""
        if self.torch_type is None:
            raise ValueError("'auto' must be resolved to a backend before use")
        return self.torch_type if self.index is None else f"{self.torch_type}:{self.index}"

    def __str__(self) -> str:
        return self.kind if self.index is None else f"{self.kind}:{self.index}"


def _accepted_forms(extra_kinds: Iterable[str]) -> str:
    extra = sorted(set(extra_kinds) - set(KIND_TO_TORCH_TYPE) - {AUTO})
    forms = list(ACCEPTED_FORMS) + [f"{kind}[:N]" for kind in extra]
    return ", ".join(forms)


def parse_device(device: str | DeviceSpec, *, extra_kinds: Iterable[str] = ()) -> DeviceSpec:
    """Parse a device string into a ``DeviceSpec``.

    ``extra_kinds`` are further device types served by installed plugins; each maps to
    the torch device type of the same name. A ``DeviceSpec`` is returned unchanged.

    Raises ``InvalidDeviceString`` (a ``ValueError``) listing the accepted forms when
    ``device`` is not a string or does not match one of them.
    """
    if isinstance(device, DeviceSpec):
        return device
    extra_kinds = tuple(extra_kinds)
    if not isinstance(device, str):
        raise InvalidDeviceString(
            f"a device must be a string such as 'cuda:0', got {type(device).__name__}; "
            f"accepted forms: {_accepted_forms(extra_kinds)}"
        )
    text = device.strip().lower()
    match = _DEVICE_RE.fullmatch(text)
    kind = match["kind"] if match else None
    known = kind == AUTO or kind in KIND_TO_TORCH_TYPE or kind in extra_kinds
    if match is None or not known:
        raise InvalidDeviceString(
            f"invalid device string {device!r}; accepted forms: {_accepted_forms(extra_kinds)}"
            " (N is a device index such as 0)"
        )
    assert kind is not None
    index = None if match["index"] is None else int(match["index"])
    if kind == AUTO and index is not None:
        raise InvalidDeviceString(f"invalid device string {device!r}: 'auto' takes no index")
    if kind in _SINGLE_DEVICE_KINDS and index not in (None, 0):
        raise InvalidDeviceString(
            f"invalid device string {device!r}: there is one {kind} device, write '{kind}'"
        )
    if index is not None and index >= MAX_DEVICE_INDEX:
        raise InvalidDeviceString(
            f"invalid device string {device!r}: index {index} is not below {MAX_DEVICE_INDEX}"
        )
    torch_type = None if kind == AUTO else KIND_TO_TORCH_TYPE.get(kind, kind)
    return DeviceSpec(kind=kind, torch_type=torch_type, index=index)
