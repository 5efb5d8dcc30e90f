"""Finding backend plugins through entry points, each load guarded, each failure recorded.

``discover_entries`` walks the ``eagle_hal.backends`` entry points of the installed
distributions, applies the allow/block lists, imports each remaining plugin module inside
a guard, registers it with a pluggy ``PluginManager`` and calls its ``eagle_hal_backends``
hook. The result is one ``PluginEntry`` per declared backend, or per plugin that failed
before it could declare any, so that every plugin shows up in diagnostics.

Pluggy's own ``load_setuptools_entrypoints`` is not used: one broken plugin would abort it.
"""

from __future__ import annotations

import dataclasses
import enum
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from importlib import metadata
from typing import Any

from eagle_hal.backend import API_VERSION, Availability, BackendDescriptor, Capabilities
from eagle_hal.errors import BackendConflict, IncompatibleAPIVersion, PluginLoadError

__all__ = ["BackendInfo", "PluginEntry", "PluginStatus", "api_compatible", "discover_entries"]

_DISABLE_HINT = "EAGLE_HAL_DISABLE"


class PluginStatus(enum.Enum):
    """Where a discovered backend stands; everything but AVAILABLE says why not usable."""

    AVAILABLE = "available"
    UNAVAILABLE = "unavailable"  # loaded fine, its probe says it cannot run here
    NOT_PROBED = "not probed"
    LOAD_ERROR = "load error"  # import, registration or the hook raised
    PROBE_ERROR = "probe error"  # the probe raised or returned something else
    INCOMPATIBLE_API = "incompatible api"
    CONFLICT = "conflict"
    BLOCKED = "blocked"  # named in EAGLE_HAL_DISABLE; never imported
    NOT_ALLOWED = "not allowed"  # absent from EAGLE_HAL_PLUGINS; never imported


# ``eagle-hal backends --json``'s ``status``: the statuses a script needs to tell apart.
JSON_STATUS: dict[PluginStatus, str] = {
    PluginStatus.AVAILABLE: "available",
    PluginStatus.UNAVAILABLE: "unavailable",
    PluginStatus.NOT_PROBED: "unavailable",  # listing probes every backend; kept for safety
    PluginStatus.LOAD_ERROR: "load_error",
    PluginStatus.PROBE_ERROR: "load_error",
    PluginStatus.INCOMPATIBLE_API: "load_error",
    PluginStatus.CONFLICT: "conflict",
    PluginStatus.BLOCKED: "blocked",
    PluginStatus.NOT_ALLOWED: "blocked",
}


def api_compatible(plugin: tuple[int, int], core: tuple[int, int] = API_VERSION) -> bool:
    """The rule of ``eagle_hal.backend.API_VERSION``: same major, plugin minor <= core's."""
    return plugin[0] == core[0] and plugin[1] <= core[1]


def _api_string(version: tuple[int, int] | None) -> str | None:
    return None if version is None else f"{version[0]}.{version[1]}"


@dataclasses.dataclass(frozen=True, slots=True)
class BackendInfo:
    """A snapshot of one discovered backend, as ``eagle-hal backends`` shows it."""

    name: str
    distribution: str
    version: str
    device_types: tuple[str, ...]
    api_version: tuple[int, int] | None
    priority: int | None
    status: PluginStatus
    reason: str
    capabilities: Capabilities | None
    error: PluginLoadError | None = None

    @property
    def available(self) -> bool:
        return self.status is PluginStatus.AVAILABLE

    def to_json(self) -> dict[str, Any]:
        """The JSON object of ``eagle-hal backends --json``."""
        return {
            "name": self.name,
            "distribution": self.distribution,
            "version": self.version,
            "device_types": list(self.device_types),
            "api_version": _api_string(self.api_version),
            "available": self.available,
            "status": JSON_STATUS[self.status],
            "reason": self.reason,
            "capabilities": None if self.capabilities is None else self.capabilities.as_dict(),
        }


@dataclasses.dataclass(slots=True)
class PluginEntry:
    """The registry's mutable record of one backend (or of a plugin that declared none)."""

    name: str
    distribution: str
    version: str
    entry_point: str
    status: PluginStatus
    descriptor: BackendDescriptor | None = None
    error: PluginLoadError | None = None
    availability: Availability | None = None
    gate_reason: str = ""

    @property
    def device_types(self) -> tuple[str, ...]:
        return self.descriptor.device_types if self.descriptor else ()

    @property
    def gated(self) -> bool:
        """Left out by the allow-list or the block-list (not an error)."""
        return self.status in (PluginStatus.BLOCKED, PluginStatus.NOT_ALLOWED)

    @property
    def selectable(self) -> bool:
        """Loaded, declared and not left out: a candidate for selection."""
        return self.descriptor is not None and self.error is None and not self.gated

    @property
    def where(self) -> str:
        return f"backend {self.name!r} ({self.distribution} {self.version})"

    @property
    def reason(self) -> str:
        if self.error is not None:
            return str(self.error)
        if self.availability is not None:
            return self.availability.reason
        return self.gate_reason or "not probed yet"

    def run_probe(self) -> None:
        """Call the descriptor's probe once, turning a raise or a bad result into an error."""
        if self.status is not PluginStatus.NOT_PROBED or self.descriptor is None:
            return
        try:
            result = self.descriptor.probe()
        except Exception as exc:
            what = f"its probe raised {type(exc).__name__}: {exc}"
            self.fail(PluginStatus.PROBE_ERROR, what, exc)
            return
        if not isinstance(result, Availability):
            self.fail(
                PluginStatus.PROBE_ERROR,
                f"its probe returned {type(result).__name__}, not eagle_hal.Availability",
                None,
            )
            return
        self.availability = result
        self.status = PluginStatus.AVAILABLE if result.ok else PluginStatus.UNAVAILABLE

    def fail(self, status: PluginStatus, what: str, cause: BaseException | None) -> None:
        error = PluginLoadError(
            f"{self.where} is broken: {what}; fix or reinstall {self.distribution}, "
            f"or block it with {_DISABLE_HINT}={self.name}"
        )
        error.__cause__ = cause
        self.status, self.error = status, error

    def info(self) -> BackendInfo:
        d = self.descriptor
        return BackendInfo(
            name=self.name,
            distribution=self.distribution,
            version=self.version,
            device_types=self.device_types,
            api_version=None if d is None else d.api_version,
            priority=None if d is None else d.priority,
            status=self.status,
            reason=self.reason,
            capabilities=None if d is None else d.capabilities,
            error=self.error,
        )


def _normalize(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def _entry_points(path: Sequence[str] | None, group: str) -> Iterator[tuple[Any, str, str]]:
    """``(entry_point, distribution, version)`` per entry point; the first of a name wins."""
    found = metadata.distributions() if path is None else metadata.distributions(path=list(path))
    seen: set[str] = set()
    for dist in found:
        try:
            name = dist.metadata["Name"]
            if not name or _normalize(name) in seen:
                continue
            seen.add(_normalize(name))
            points = [ep for ep in dist.entry_points if ep.group == group]
        except Exception:  # an unreadable dist-info is not ours to report
            continue
        for ep in points:
            yield ep, name, dist.version or "?"


class _Gate:
    """The allow-list and the block-list, applied before import and after."""

    def __init__(self, allow: frozenset[str] | None, disable: frozenset[str] | None) -> None:
        self.allow, self.disable = allow, disable or frozenset()

    def check(self, entry: PluginEntry) -> bool:
        """Mark ``entry`` BLOCKED or NOT_ALLOWED and return False if it must not load."""
        blocked = {entry.name, f"{entry.name}@{entry.distribution}"}
        blocked |= {f"{entry.name}@{_normalize(entry.distribution)}"}
        if blocked & self.disable:
            names = ",".join(sorted(self.disable))
            entry.status = PluginStatus.BLOCKED
            entry.gate_reason = f"blocked by {_DISABLE_HINT}={names}"
        elif self.allow is not None and entry.name not in self.allow:
            names = ",".join(sorted(self.allow))
            entry.status = PluginStatus.NOT_ALLOWED
            entry.gate_reason = f"not in the allow-list EAGLE_HAL_PLUGINS={names}"
        else:
            return True
        return False


def discover_entries(
    *,
    path: Sequence[str] | None,
    allow: frozenset[str] | None,
    disable: frozenset[str] | None,
) -> tuple[Any, list[PluginEntry]]:
    """Load every allowed plugin; return the pluggy manager and one entry per backend."""
    import pluggy

    from eagle_hal import hookspecs

    manager = pluggy.PluginManager(hookspecs.PROJECT_NAME)
    manager.add_hookspecs(hookspecs)
    gate = _Gate(allow, disable)
    entries: list[PluginEntry] = []
    for ep, distribution, version in _entry_points(path, hookspecs.ENTRY_POINT_GROUP):
        plugin = PluginEntry(ep.name, distribution, version, ep.value, PluginStatus.NOT_PROBED)
        if not gate.check(plugin):
            entries.append(plugin)
            continue
        for entry in _load(manager, ep, plugin):
            if entry.error is None and gate.check(entry):
                _check_api(entry)
            entries.append(entry)
    _mark_conflicts(entries)
    return manager, entries


def _load(manager: Any, ep: Any, plugin: PluginEntry) -> list[PluginEntry]:
    """Import, register and ask one plugin; a failure yields one entry carrying the error."""
    step = f"importing {ep.value!r}"
    try:
        module = ep.load()
        step = "registering it with pluggy"
        manager.register(module, name=f"{plugin.distribution}:{ep.name}")
        step = "finding its eagle_hal_backends hook"
        hooks = [h for h in manager.hook.eagle_hal_backends.get_hookimpls() if h.plugin is module]
        if not hooks:
            raise LookupError(
                "the module has no function marked @eagle_hal.hookspecs.hookimpl named "
                "eagle_hal_backends"
            )
        step = "calling its eagle_hal_backends hook"
        descriptors = [d for hook in hooks for d in hook.function()]
        for d in descriptors:
            if not isinstance(d, BackendDescriptor):
                raise TypeError(f"the hook returned {type(d).__name__}, not BackendDescriptor")
        if not descriptors:
            raise LookupError("the hook declared no backends")
    except (Exception, SystemExit) as exc:
        plugin.fail(PluginStatus.LOAD_ERROR, f"{step} raised {type(exc).__name__}: {exc}", exc)
        return [plugin]
    return [
        dataclasses.replace(plugin, name=d.name, descriptor=d, status=PluginStatus.NOT_PROBED)
        for d in descriptors
    ]


def _check_api(entry: PluginEntry) -> None:
    d = entry.descriptor
    if d is None or entry.error is not None:
        return
    version = d.api_version
    well_formed = (
        isinstance(version, tuple)
        and len(version) == 2
        and all(isinstance(v, int) for v in version)
    )
    if not well_formed:
        entry.fail(PluginStatus.LOAD_ERROR, f"api_version {version!r} is not (major, minor)", None)
    elif not api_compatible(version):
        from eagle_hal._version import __version__

        core = _api_string(API_VERSION)
        entry.status = PluginStatus.INCOMPATIBLE_API
        entry.error = IncompatibleAPIVersion(
            f"{entry.where} was written against HAL API {_api_string(version)}, but this "
            f"eagle-hal {__version__} provides HAL API {core} (a plugin needs the same major "
            f"and a minor no newer); install a release of {entry.distribution} built for HAL "
            f"API {API_VERSION[0]}.x, or an eagle-hal that provides API {_api_string(version)}"
        )


def _mark_conflicts(entries: list[PluginEntry]) -> None:
    by_name: dict[str, list[PluginEntry]] = defaultdict(list)
    for entry in entries:
        if entry.descriptor is not None and not entry.gated:
            by_name[entry.name].append(entry)
    for name, clashing in by_name.items():
        if len(clashing) < 2:
            continue
        owners = ", ".join(f"{e.distribution} {e.version} ({e.entry_point})" for e in clashing)
        for entry in clashing:
            entry.status = PluginStatus.CONFLICT
            entry.error = BackendConflict(
                f"backend name {name!r} is registered by several distributions: {owners}; "
                f"uninstall all but one, or block the others with "
                f"{_DISABLE_HINT}={name}@<distribution>"
            )
