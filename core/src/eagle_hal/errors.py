"""The exceptions a user of eagle-hal can meet while choosing a backend.

Every message says what went wrong and what to do about it. The hierarchy::

    EagleHalError
    ├── InvalidDeviceString (also a ValueError)   the device string is malformed
    └── BackendUnavailable                        no usable backend for the request
        └── PluginLoadError                       a plugin failed to load, probe or build
            ├── IncompatibleAPIVersion            written against another HAL contract
            └── BackendConflict                   two distributions claim one backend name

``PluginLoadError`` is a ``BackendUnavailable`` so that code catching "cannot get a
backend" also catches a broken plugin; the original exception is its ``__cause__``.
"""

from __future__ import annotations

__all__ = [
    "BackendConflict",
    "BackendUnavailable",
    "EagleHalError",
    "IncompatibleAPIVersion",
    "InvalidDeviceString",
    "PluginLoadError",
]


class EagleHalError(Exception):
    """Base class of every error eagle-hal raises on purpose."""


class InvalidDeviceString(EagleHalError, ValueError):
    """A device string that does not match any accepted form (see ``eagle_hal.device``)."""


class BackendUnavailable(EagleHalError):
    """No installed backend can serve the request; the message explains each candidate."""


class PluginLoadError(BackendUnavailable):
    """A backend plugin raised while loading, probing or building its implementation.

    Raised when such a backend is selected; the original exception is chained as
    ``__cause__``. Listing backends reports the same error without raising.
    """


class IncompatibleAPIVersion(PluginLoadError):
    """A plugin was written against a HAL API version this eagle-hal does not provide."""


class BackendConflict(PluginLoadError):
    """Two installed distributions register a backend under the same name."""
