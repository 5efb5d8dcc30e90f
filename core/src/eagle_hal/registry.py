"""The backend registry: discovery, allow/block lists, API checks, selection, diagnostics.

Discovery is lazy. Nothing happens at ``import eagle_hal``; the first listing or selection
walks the ``eagle_hal.backends`` entry points (``eagle_hal._discovery``), imports each
allowed plugin module inside a guard, registers it with a pluggy ``PluginManager`` and
collects its ``BackendDescriptor`` list. Probes run only when a backend is listed or
considered for selection, and their results are cached. A backend's implementation class
is imported only when that backend is selected.

A plugin that fails never breaks the others and is never skipped silently: it is listed
with its error, and selecting it raises the matching ``PluginLoadError``.

Environment (read when the registry is created, except ``EAGLE_HAL_BACKEND``, read at each
selection; all through ``eagle_hal.settings``):

``EAGLE_HAL_PLUGINS``  comma-separated backend names; when set, only these are loaded.
``EAGLE_HAL_DISABLE``  comma-separated backend names to block; ``name@distribution``
                       blocks that backend from one distribution only (resolves a clash).
``EAGLE_HAL_BACKEND``  forces the backend used by every selection (like ``backend=``).
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Iterable, Mapping, Sequence

from eagle_hal import settings
from eagle_hal._discovery import BackendInfo, PluginEntry, PluginStatus, discover_entries
from eagle_hal.backend import Availability, Backend, BackendDescriptor
from eagle_hal.device import DeviceSpec, parse_device
from eagle_hal.errors import BackendUnavailable, PluginLoadError

__all__ = [
    "BackendInfo",
    "ENV_BACKEND",
    "ENV_DISABLE",
    "ENV_PLUGINS",
    "PluginStatus",
    "Registry",
    "default_registry",
    "list_backends",
    "reset_default_registry",
    "select_backend",
]

ENV_PLUGINS = "EAGLE_HAL_PLUGINS"
ENV_DISABLE = "EAGLE_HAL_DISABLE"
ENV_BACKEND = "EAGLE_HAL_BACKEND"

# The device kind that is not an accelerator; `auto` prefers every other kind to it.
_HOST_KIND = "cpu"


def _split_names(value: str | Iterable[str] | None) -> frozenset[str] | None:
    if value is None:
        return None
    items = value.split(",") if isinstance(value, str) else value
    names = frozenset(item.strip() for item in items if item.strip())
    return names or None


class Registry:
    """Discovered backends and the rules for choosing among them.

    ``path``: where to look for installed distributions (default ``sys.path``); plugin
    modules are imported through the normal import system, so they must be importable.
    ``allow`` / ``disable``: backend names (or ``name@distribution`` for ``disable``);
    ``None`` reads ``EAGLE_HAL_PLUGINS`` / ``EAGLE_HAL_DISABLE`` from ``environ``.
    ``environ``: the environment to read (default ``os.environ``).
    """

    def __init__(
        self,
        *,
        path: Sequence[str] | None = None,
        allow: str | Iterable[str] | None = None,
        disable: str | Iterable[str] | None = None,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self._environ = environ  # None: os.environ, as it stands when read
        self._path = None if path is None else [str(p) for p in path]
        if allow is None:
            allow = settings.get(ENV_PLUGINS, environ)
        if disable is None:
            disable = settings.get(ENV_DISABLE, environ)
        self.allow = _split_names(allow)
        self.disable = _split_names(disable)
        self._entries: list[PluginEntry] | None = None
        self._lock = threading.RLock()

    # -- discovery --------------------------------------------------------------------

    def _discover(self) -> list[PluginEntry]:
        with self._lock:
            if self._entries is None:
                _, self._entries = discover_entries(
                    path=self._path, allow=self.allow, disable=self.disable
                )
            return self._entries

    def device_kinds(self) -> frozenset[str]:
        """Every device kind some loaded backend declares it serves."""
        return frozenset(
            kind for entry in self._discover() if entry.selectable for kind in entry.device_types
        )

    def entries(self, name: str | None = None) -> list[PluginEntry]:
        """Discovered entries (optionally only those for backend ``name``), without probing."""
        return [e for e in self._discover() if name is None or e.name == name]

    # -- probing ----------------------------------------------------------------------

    def _probe(self, entry: PluginEntry) -> PluginEntry:
        with self._lock:
            entry.run_probe()
        return entry

    def availability(self, name: str) -> Availability:
        """Probe backend ``name`` (cached). Raises ``BackendUnavailable`` if none is known."""
        entry = self._single_entry(name)
        self._probe(entry)
        if entry.availability is None or entry.error is not None:
            return Availability.unavailable(entry.reason)
        return entry.availability

    def backends(self) -> list[BackendInfo]:
        """Every discovered backend, probed, sorted by name: the diagnostics listing."""
        infos = [self._probe(entry).info() for entry in self._discover()]
        return sorted(infos, key=lambda info: (info.name, info.distribution))

    # -- selection --------------------------------------------------------------------

    def select(self, device: str | DeviceSpec, *, backend: str | None = None) -> Backend:
        """The backend for ``device``, constructed and bound to it.

        ``backend`` (else ``EAGLE_HAL_BACKEND``) forces a backend by name; otherwise the
        available candidate serving the device kind with the highest priority wins, and
        ``auto`` prefers any accelerator to the CPU.

        Raises ``InvalidDeviceString`` for a malformed device, ``BackendUnavailable`` when
        no candidate is usable (saying why for each), ``PluginLoadError`` (and its
        subclasses) when the chosen plugin is broken, conflicting or incompatible.
        """
        spec = parse_device(device, extra_kinds=self.device_kinds())
        if backend is None:
            forced = settings.get(ENV_BACKEND, self._environ).strip()
        else:
            forced = backend
        if forced:
            entry = self._forced_entry(forced, spec, from_env=backend is None)
        else:
            entry = self._best_entry(spec)
        if spec.is_auto:
            spec = parse_device(_preferred_kind(entry.descriptor), extra_kinds=self.device_kinds())
        _check_index(spec)
        return _instantiate(entry, spec)

    def _single_entry(self, name: str) -> PluginEntry:
        matches = self.entries(name)
        if not matches:
            installed = ", ".join(sorted({e.name for e in self._discover()})) or "none"
            raise BackendUnavailable(
                f"no backend named {name!r} is installed (installed: {installed}); "
                f"install the plugin distribution that provides it"
            )
        # Entries share a name only in a clash: each carries the conflict error unless all
        # but one were blocked by name@distribution, so prefer the one left in.
        return min(matches, key=lambda entry: entry.gated)

    def _forced_entry(self, name: str, spec: DeviceSpec, *, from_env: bool) -> PluginEntry:
        origin = f"{ENV_BACKEND}={name}" if from_env else f"backend={name!r}"
        entry = self._probe(self._single_entry(name))
        if entry.error is not None:
            # A fresh exception per selection, chained to the plugin's original failure.
            raise type(entry.error)(str(entry.error)) from entry.error.__cause__
        if entry.gated:
            raise BackendUnavailable(f"{entry.where}, forced by {origin}, is {entry.reason}")
        assert entry.descriptor is not None and entry.availability is not None
        if not spec.is_auto and spec.kind not in entry.device_types:
            raise BackendUnavailable(
                f"{origin} forces backend {name!r}, which does not serve device '{spec}' "
                f"(it serves: {', '.join(entry.device_types)}); ask for one of those devices"
                + (f" or unset {ENV_BACKEND}" if from_env else "")
            )
        if not entry.availability.ok:
            raise BackendUnavailable(
                f"backend {name!r} ({entry.distribution} {entry.version}), forced by {origin}, "
                f"is unavailable: {entry.availability.reason}"
            )
        return entry

    def _best_entry(self, spec: DeviceSpec) -> PluginEntry:
        candidates = [
            e
            for e in self._discover()
            if e.descriptor is not None
            and not e.gated
            and (spec.is_auto or spec.kind in e.device_types)
        ]
        candidates.sort(key=lambda e: _rank(e, prefer_accelerator=spec.is_auto))
        for entry in candidates:
            self._probe(entry)
            if entry.error is None and entry.availability and entry.availability.ok:
                return entry
        self._raise_unavailable(spec, candidates)
        raise AssertionError("unreachable")  # pragma: no cover

    def _raise_unavailable(self, spec: DeviceSpec, candidates: list[PluginEntry]) -> None:
        lines = [f"  {e.name} ({e.distribution} {e.version}): {e.reason}" for e in candidates]
        skipped = [e for e in self._discover() if e.gated]
        lines += [f"  {e.name} ({e.distribution} {e.version}): {e.reason}" for e in skipped]
        if not candidates:
            served = ", ".join(sorted(self.device_kinds())) or "nothing"
            head = (
                f"no installed backend serves device '{spec}' (installed backends serve: "
                f"{served}); install a plugin for it or choose another device"
            )
        else:
            head = f"no available backend for device '{spec}':"
        message = "\n".join([head, *lines])
        errors = [e.error for e in candidates if e.error is not None]
        if candidates and len(errors) == len(candidates):
            raise PluginLoadError(message) from (errors[0].__cause__ or errors[0])
        raise BackendUnavailable(message) from (errors[0] if errors else None)


def _rank(entry: PluginEntry, *, prefer_accelerator: bool) -> tuple[int, int, str, str]:
    is_host_only = all(kind == _HOST_KIND for kind in entry.device_types)
    return (
        int(prefer_accelerator and is_host_only),
        -(entry.descriptor.priority if entry.descriptor else 0),
        entry.name,
        entry.distribution,
    )


def _preferred_kind(descriptor: BackendDescriptor | None) -> str:
    assert descriptor is not None
    accelerators = [kind for kind in descriptor.device_types if kind != _HOST_KIND]
    return (accelerators or list(descriptor.device_types))[0]


def _check_index(spec: DeviceSpec) -> None:
    """``BackendUnavailable`` with the count when ``spec`` names a device index beyond the
    devices torch sees, so that ``cuda:7`` on a host of two GPUs fails at selection rather
    than inside the first allocation. Device types torch cannot count, or counts none of
    (a backend may reach its devices another way), are left to the backend's probe."""
    if spec.index is None or spec.torch_type in (None, "cpu"):
        return
    try:
        import torch

        count = int(torch.get_device_module(spec.torch_type).device_count())
    except Exception:  # a type this torch build cannot count: the backend decides
        return
    if 0 < count <= spec.index:
        raise BackendUnavailable(
            f"device '{spec}' asks for index {spec.index}, but {count} {spec.torch_type} "
            f"device{'' if count == 1 else 's'} {'is' if count == 1 else 'are'} visible "
            f"(indices 0..{count - 1}); choose one of those or check the visible-devices variable"
        )


def _instantiate(entry: PluginEntry, spec: DeviceSpec) -> Backend:
    descriptor = entry.descriptor
    assert descriptor is not None
    where = f"backend {entry.name!r} ({entry.distribution} {entry.version})"
    module_name, _, class_name = descriptor.implementation.partition(":")
    try:
        backend_class = getattr(importlib.import_module(module_name), class_name)
    except Exception as exc:
        raise PluginLoadError(
            f"{where}: importing its implementation {descriptor.implementation!r} failed: "
            f"{type(exc).__name__}: {exc}; reinstall the plugin or block it with "
            f"{ENV_DISABLE}={entry.name}"
        ) from exc
    if not (isinstance(backend_class, type) and issubclass(backend_class, Backend)):
        raise PluginLoadError(
            f"{where}: {descriptor.implementation!r} is not a subclass of eagle_hal.Backend"
        )
    try:
        return backend_class(descriptor, spec)
    except Exception as exc:
        raise PluginLoadError(
            f"{where}: constructing {class_name} for device '{spec}' failed: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


# -- the process-wide registry ---------------------------------------------------------

_default: Registry | None = None
_default_lock = threading.Lock()


def default_registry() -> Registry:
    """The registry over ``sys.path`` and ``os.environ``, created on first use."""
    global _default
    with _default_lock:
        if _default is None:
            _default = Registry()
        return _default


def reset_default_registry() -> None:
    """Forget the default registry (after installing plugins or changing the environment)."""
    global _default
    with _default_lock:
        _default = None


def select_backend(device: str | DeviceSpec, *, backend: str | None = None) -> Backend:
    """Choose and construct the backend for ``device`` (see ``Registry.select``)."""
    return default_registry().select(device, backend=backend)


def list_backends() -> list[BackendInfo]:
    """Every discovered backend with its availability (see ``Registry.backends``)."""
    return default_registry().backends()
