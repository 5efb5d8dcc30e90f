"""The exceptions a user meets while loading a model, a draft head or a tokenizer.

Every message names the file or tensor involved and says what to do. The hierarchy::

    EagleHalError
    └── ModelLoadError
        ├── ModelFileNotFound (also a FileNotFoundError)   a file or directory is missing
        ├── CorruptFileError                               a file is unreadable, truncated or
        │                                                  malformed, or its header lies
        ├── InvalidConfigError (also a ValueError)         a config value has the wrong type
        │                                                  or lies outside its range
        ├── UnsupportedModelError                          architecture/feature not supported
        ├── TensorShapeMismatch                            a tensor's shape is not the model's
        ├── MissingTensorsError                            the checkpoint lacks tensors
        └── UnexpectedTensorsError                         the checkpoint has unknown tensors
"""

from __future__ import annotations

from collections.abc import Iterable

from eagle_hal.errors import EagleHalError

__all__ = [
    "CorruptFileError",
    "InvalidConfigError",
    "MissingTensorsError",
    "ModelFileNotFound",
    "ModelLoadError",
    "TensorShapeMismatch",
    "UnexpectedTensorsError",
    "UnsupportedModelError",
]

_MAX_NAMES_SHOWN = 8


def _some(names: Iterable[str]) -> str:
    ordered = sorted(names)
    shown = ", ".join(ordered[:_MAX_NAMES_SHOWN])
    more = len(ordered) - _MAX_NAMES_SHOWN
    return shown + (f" ... and {more} more" if more > 0 else "")


class ModelLoadError(EagleHalError):
    """Base class of every model/tokenizer loading failure."""


class ModelFileNotFound(ModelLoadError, FileNotFoundError):
    """A model file or directory does not exist, or lacks a file it needs."""


class CorruptFileError(ModelLoadError):
    """A model, head or tokenizer file cannot be read as what it claims to be: unreadable,
    empty, truncated, not valid UTF-8/JSON, or a header whose sizes and offsets do not fit
    the file."""


class InvalidConfigError(ModelLoadError, ValueError):
    """A configuration value (config.json key or GGUF metadata) has the wrong type, lies
    outside its range, or describes a model larger than the weights that come with it.
    Also a ``ValueError``, the type of ``ModelConfig``'s own geometry checks."""


class UnsupportedModelError(ModelLoadError):
    """The checkpoint's architecture or one of its features is not implemented."""


class TensorShapeMismatch(ModelLoadError):
    """A checkpoint tensor's shape differs from the shape the model expects."""

    def __init__(self, name: str, expected: tuple[int, ...], got: tuple[int, ...], source: str):
        super().__init__(
            f"tensor {name!r} in {source} has shape {list(got)}, but the model expects "
            f"{list(expected)}; the checkpoint does not match its config.json/metadata"
        )
        self.name, self.expected, self.got = name, expected, got


class MissingTensorsError(ModelLoadError):
    """The checkpoint lacks tensors the model needs."""

    def __init__(self, names: Iterable[str], source: str):
        self.names = frozenset(names)
        super().__init__(
            f"{source} lacks {len(self.names)} tensor(s) the model needs: {_some(self.names)}"
        )


class UnexpectedTensorsError(ModelLoadError):
    """The checkpoint holds tensors the model has no place for (a different architecture?)."""

    def __init__(self, names: Iterable[str], source: str):
        self.names = frozenset(names)
        super().__init__(
            f"{source} holds {len(self.names)} tensor(s) this model does not use: "
            f"{_some(self.names)}; is it a different architecture?"
        )
