"""The pluggy hook specifications a backend plugin implements.

A backend plugin is a distribution that declares an entry point in the group
``eagle_hal.backends``::

    [project.entry-points."eagle_hal.backends"]
    mybackend = "my_package.plugin"

The entry point names a *light plugin module*: importing it must import no vendor
library (no device runtime, no torch extension) and must not touch a device, because the
registry imports every allowed plugin module whenever it lists or selects backends. The
module marks its hook functions with ``hookimpl``::

    from eagle_hal.hookspecs import hookimpl

    @hookimpl
    def eagle_hal_backends():
        return [BackendDescriptor(name="mybackend", ...)]

By convention the entry-point name is the backend name; the allow-list
(``EAGLE_HAL_PLUGINS``) and the block-list (``EAGLE_HAL_DISABLE``) are applied to it
before the module is imported, and to the declared backend names after.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.backend import BackendDescriptor

__all__ = ["ENTRY_POINT_GROUP", "PROJECT_NAME", "hookimpl", "hookspec"]

PROJECT_NAME = "eagle_hal"
ENTRY_POINT_GROUP = "eagle_hal.backends"

hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


@hookspec
def eagle_hal_backends() -> list[BackendDescriptor]:
    """Describe the backends this plugin provides.

    Returns a list of ``eagle_hal.backend.BackendDescriptor``, usually one. Called once
    per registry, the first time it lists or selects backends.

    Contract:

    * Cheap and side-effect free: build descriptors only. Import no vendor library here;
      the descriptor's ``probe`` does that, and only when the registry asks.
    * Each descriptor's ``api_version`` is the HAL API version the plugin was written
      against (normally ``eagle_hal.backend.API_VERSION`` at the time of writing, spelled
      as a literal so that it records what the plugin was tested with). The registry
      refuses a descriptor whose major version differs from the core's or whose minor
      version is newer than the core's.
    * ``probe()`` never raises and always explains: "<library> is not installed",
      "<library> is installed but failed to import: <message>", "no device visible
      (<VISIBLE_DEVICES_VAR>=<value>)", or what it found when available. The registry
      still guards it: a raising probe is reported as a plugin error, never skipped.
    * ``implementation`` is ``"module:Class"``, a ``Backend`` subclass constructed as
      ``Class(descriptor, device_spec)``; it is imported only when the backend is
      selected.
    * Backend names are unique across installed distributions; a clash is reported as
      ``BackendConflict`` naming both distributions.

    Raising from this hook is reported as a ``PluginLoadError`` for this plugin only.
    """
    raise NotImplementedError  # pragma: no cover - a specification, never called
