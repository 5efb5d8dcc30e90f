"""The exceptions a user of eagle-hal can meet while choosing a backend or passing arguments.

Every message says what went wrong and what to do about it. The hierarchy::

    EagleHalError
    ├── InvalidDeviceString (also a ValueError)   the device string is malformed
    ├── InvalidSetting (also a ValueError)        an environment variable's value is malformed
    ├── InvalidArgument (also a ValueError)       a parameter or flag holds a value not allowed
    └── BackendUnavailable                        no usable backend for the request
        └── PluginLoadError                       a plugin failed to load, probe or build
            ├── IncompatibleAPIVersion            written against another HAL contract
            └── BackendConflict                   two distributions claim one backend name

``PluginLoadError`` is a ``BackendUnavailable`` so that code catching "cannot get a
backend" also catches a broken plugin; the original exception is its ``__cause__``.
Errors of other layers join the family where they are defined (``DatasetError``,
``ContextTooLong``, ``TreeConfigError``, ``PromptTooLong``, the model loading errors), so
that ``except EagleHalError`` catches every problem eagle-hal reports on purpose.

This module imports nothing, so that any module (``hal`` included) may import it.
"""

from __future__ import annotations

__all__ = [
    "BackendConflict",
    "BackendUnavailable",
    "EagleHalError",
    "IncompatibleAPIVersion",
    "InvalidArgument",
    "InvalidDeviceString",
    "InvalidSetting",
    "PluginLoadError",
]


class EagleHalError(Exception):
    """Base class of every error eagle-hal raises on purpose."""


class InvalidDeviceString(EagleHalError, ValueError):
    """A device string that does not match any accepted form (see ``eagle_hal.device``)."""


class InvalidSetting(EagleHalError, ValueError):
    """An environment variable eagle-hal reads holds a value its declared type does not
    allow (see ``eagle_hal.settings``). ``name``, ``value`` and ``allowed`` say which, what
    and what would do; the message says all three."""

    def __init__(self, name: str, value: str, allowed: str) -> None:
        super().__init__(f"{name}={value!r} is not valid: expected {allowed}")
        self.name, self.value, self.allowed = name, value, allowed

    def __reduce__(self):  # picklable across processes (conformance workers, spawn)
        return type(self), (self.name, self.value, self.allowed)


class InvalidArgument(EagleHalError, ValueError):
    """A parameter (a Python argument such as ``top_p``, or a command-line flag such as
    ``--top-p``) holds a value it does not allow (see ``eagle_hal.validation``). ``name``,
    ``value`` and ``allowed`` say which, what and what would do; the message says all three."""

    def __init__(self, name: str, value: object, allowed: str) -> None:
        super().__init__(f"{name}={value!r} is not valid: expected {allowed}")
        self.name, self.value, self.allowed = name, value, allowed

    def __reduce__(self):  # picklable across processes (tensor-parallel ranks, spawn)
        return type(self), (self.name, self.value, self.allowed)


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
