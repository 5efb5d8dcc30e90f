"""Building blocks for backend probes that never raise and always explain.

A probe answers "can this backend run here, and if not, why?" in words a user can act on.
These helpers cover the steps most accelerator plugins share, without naming any vendor:

1. ``import_torch`` imports torch once per process and, if that fails, says why. Device
   extensions that register a ``torch.backends`` entry point are imported by ``import
   torch`` itself (PyTorch's device-backend autoload), so a broken vendor stack can make
   ``import torch`` fail; the reason then names the extension and the switch
   ``TORCH_DEVICE_BACKEND_AUTOLOAD=0`` that turns the autoload off.
2. ``probe_torch_extension`` tells apart "<extension> is not installed", "<extension> is
   installed but failed to import: <message>" and "no <device> visible (<VAR>=<value>)".
3. ``probe_device_module`` asks ``torch.get_device_module(device_type)`` whether devices
   are visible, naming the visible-devices variable when none is.

Each returns an ``Availability``; none raises.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import re
import sys
import threading
from collections.abc import Mapping
from types import ModuleType

from eagle_hal import settings
from eagle_hal.backend import Availability
from eagle_hal.errors import InvalidSetting

__all__ = [
    "OptInLibrary",
    "AUTOLOAD_ENV",
    "TorchImport",
    "import_torch",
    "probe_device_module",
    "probe_torch_extension",
    "visible_devices_note",
]

AUTOLOAD_ENV = "TORCH_DEVICE_BACKEND_AUTOLOAD"
_AUTOLOAD_GROUP = "torch.backends"
_AUTOLOAD_FAILURE = re.compile(
    r"Failed to load the backend extension: (?P<name>[\w.\-]+?)\.?(?:\s|$)"
)


@dataclasses.dataclass(frozen=True, slots=True)
class TorchImport:
    """The outcome of importing torch: the module, or why it could not be imported.

    ``failed_extension`` names the autoloaded device extension (its ``torch.backends``
    entry-point name) whose loading broke ``import torch``, when that is the cause.
    """

    torch: ModuleType | None
    reason: str = ""
    failed_extension: str | None = None

    @property
    def ok(self) -> bool:
        return self.torch is not None


_torch_import: TorchImport | None = None
_torch_lock = threading.Lock()


def _autoload_extensions() -> list[str]:
    from importlib import metadata

    try:
        points = metadata.entry_points(group=_AUTOLOAD_GROUP)
        return sorted(f"{ep.name} ({ep.value})" for ep in points)
    except Exception:
        return []


def _explain_torch_failure(exc: BaseException) -> TorchImport:
    message = f"import torch failed: {type(exc).__name__}: {exc}"
    match = _AUTOLOAD_FAILURE.search(str(exc))
    cause = exc.__cause__
    if match:
        name = match["name"]
        detail = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        reason = (
            f"import torch failed while autoloading the device extension {name!r} "
            f"(a '{_AUTOLOAD_GROUP}' entry point): {detail}; fix or uninstall that "
            f"extension, or set {AUTOLOAD_ENV}=0 to stop torch from loading it"
        )
        return TorchImport(None, reason, failed_extension=name)
    extensions = _autoload_extensions()
    if extensions and settings.get(AUTOLOAD_ENV) == "1":  # torch autoloads only then
        message += (
            f"; torch also imports these device extensions on import: "
            f"{', '.join(extensions)}; set {AUTOLOAD_ENV}=0 to rule them out"
        )
    return TorchImport(None, message)


def import_torch() -> TorchImport:
    """Import torch, once per process; never raises.

    A failed ``import torch`` leaves half-initialised submodules behind, so it is not
    retried: the first outcome is cached and returned to every later caller.
    """
    global _torch_import
    with _torch_lock:
        if _torch_import is None:
            try:
                import torch
            except (Exception, SystemExit) as exc:
                _torch_import = _explain_torch_failure(exc)
            else:
                _torch_import = TorchImport(torch)
        return _torch_import


def visible_devices_note(variable: str | None, environ: Mapping[str, str] | None = None) -> str:
    """``"VAR='0,1'"`` or ``"VAR is unset"``: how the visible-devices variable stands."""
    if variable is None:
        return "no visible-devices variable"
    value = settings.visible_devices(variable, environ)
    return f"{variable} is unset" if value is None else f"{variable}={value!r}"


def probe_device_module(
    torch: ModuleType, device_type: str, *, label: str, visible_devices_env: str | None
) -> Availability:
    """Whether ``torch.get_device_module(device_type)`` sees a device; never raises.

    ``label`` is how the device is called in messages ("Intel GPU"); the reason for an
    empty device list names ``visible_devices_env`` and its value.
    """
    try:
        module = torch.get_device_module(device_type)
    except Exception as exc:
        return Availability.unavailable(
            f"torch {torch.__version__} has no '{device_type}' device type "
            f"({type(exc).__name__}: {exc})"
        )
    try:
        count = int(module.device_count()) if module.is_available() else 0
    except Exception as exc:
        return Availability.unavailable(
            f"the {label} runtime failed to initialise: {type(exc).__name__}: {exc}"
        )
    visible = visible_devices_note(visible_devices_env)
    if count < 1:
        return Availability.unavailable(f"no {label} device visible ({visible})")
    return Availability.available(
        f"{count} {label} device{'s' if count > 1 else ''} visible ({visible}); "
        f"torch {torch.__version__}"
    )


def probe_torch_extension(
    extension: str,
    *,
    device_type: str,
    label: str,
    visible_devices_env: str | None,
    install_hint: str,
) -> Availability:
    """Probe an out-of-tree torch device extension (a module such as ``vendor_torch``).

    Distinguishes, in order: torch not importable (naming a broken autoload); the
    extension not installed (``install_hint`` says how to install it); installed but
    failing to import (with the error); imported but no device visible (naming
    ``visible_devices_env`` and its value). Never raises.
    """
    result = import_torch()
    if result.torch is None:
        if result.failed_extension == extension:
            return Availability.unavailable(
                f"{extension} is installed but failed to import: {result.reason}"
            )
        return Availability.unavailable(result.reason)
    try:
        spec = importlib.util.find_spec(extension)
    except Exception as exc:  # a broken parent package or a bad __spec__
        return Availability.unavailable(
            f"{extension} is installed but failed to import: {type(exc).__name__}: {exc}"
        )
    if spec is None:
        return Availability.unavailable(f"{extension} is not installed ({install_hint})")
    try:
        importlib.import_module(extension)
    except (Exception, SystemExit) as exc:
        return Availability.unavailable(
            f"{extension} is installed but failed to import: {type(exc).__name__}: {exc}"
        )
    return probe_device_module(
        result.torch, device_type, label=label, visible_devices_env=visible_devices_env
    )


@dataclasses.dataclass(frozen=True)
class OptInLibrary:
    """A vendor kernel library a backend uses only when ``variable`` is set to 1, decided
    without importing it: ``module`` the import name, ``feature`` what it serves (for
    messages), ``fallback`` what runs instead."""

    module: str
    variable: str
    feature: str
    fallback: str

    def requested(self, environ: Mapping[str, str] | None = None) -> tuple[bool, str | None]:
        """Whether ``variable`` (an ``int: 0 or 1`` setting) opts in, and a message when
        its value is neither 0 nor 1. ``environ``: default ``os.environ``."""
        try:
            return settings.get(self.variable, environ) == 1, None
        except InvalidSetting as error:
            return False, (f"{self.variable}={error.value!r} is neither 0 nor 1; "
                           f"{self.module} not used")

    def installed(self) -> bool:
        """Whether ``module`` is imported or importable (its spec is found; not imported)."""
        if sys.modules.get(self.module) is not None:
            return True
        try:
            return importlib.util.find_spec(self.module) is not None
        except (ImportError, ValueError):
            return False

    def probe_note(self, environ: Mapping[str, str] | None = None) -> str:
        """One clause for a probe's report: off, asked for but missing, or on."""
        requested, problem = self.requested(environ)
        if problem:
            return problem
        installed = self.installed()
        if not requested:
            state = "installed" if installed else "not installed"
            return f"{self.feature} off ({state}; opt in with {self.variable}=1)"
        if not installed:
            return f"{self.variable}=1 but {self.module} is not installed: {self.fallback}"
        return f"{self.variable}=1: {self.feature} where the model's geometry allows"
