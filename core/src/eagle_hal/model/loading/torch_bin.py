"""PyTorch ``.bin`` checkpoints of draft heads (the EAGLE authors publish ``pytorch_model.bin``).

A ``.bin`` is a pickle, and unpickling an arbitrary one runs code. It is read here only
through ``torch.load(path, weights_only=True, mmap=True, map_location="cpu")``: torch's
restricted unpickler, which rebuilds tensors and plain containers and refuses any other
object. Torch releases before 2.6 are refused outright, because their ``weights_only``
loader could be escaped (CVE-2025-32434). Only the zip format ``torch.save`` writes by
default is accepted (``mmap`` requires it): legacy tar/pickle checkpoints are refused.
Memory-mapping leaves the tensors' bytes on disk until a tensor is copied into the model.

Whatever the loader refuses, and anything that is not a flat mapping of names to tensors,
raises ``CorruptFileError`` naming the file. Targets are never read from ``.bin``.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from eagle_hal.model.errors import CorruptFileError, ModelFileNotFound, UnsupportedModelError

__all__ = ["MIN_TORCH", "check_torch_can_read_bin", "read_torch_bin"]

MIN_TORCH = (2, 6)


def _torch_version() -> tuple[int, int]:
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return (0, 0)


def check_torch_can_read_bin(path: Path) -> None:
    """``UnsupportedModelError`` when this torch is older than 2.6, whose weights-only
    loader is not safe against crafted files."""
    if _torch_version() < MIN_TORCH:
        raise UnsupportedModelError(
            f"{path} is a PyTorch pickle checkpoint; reading one safely needs torch >= 2.6 "
            f"(older weights-only loaders can be made to run code, CVE-2025-32434), and this "
            f"is torch {torch.__version__}. Upgrade torch, or convert the file to safetensors "
            "where torch >= 2.6 is installed"
        )


def read_torch_bin(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of ``path``, memory-mapped on the CPU. Raises ``ModelFileNotFound``,
    ``UnsupportedModelError`` (torch < 2.6) or ``CorruptFileError`` (not a zip checkpoint,
    an object the weights-only loader refuses, or not a mapping of names to tensors)."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileNotFound(f"PyTorch checkpoint {path} does not exist")
    check_torch_can_read_bin(path)
    if not zipfile.is_zipfile(path):
        raise CorruptFileError(
            f"{path} is not a zip-format PyTorch checkpoint (a legacy or non-PyTorch file); "
            "eagle-hal reads only what torch.save writes by default. Re-save it with "
            "torch >= 1.6, or convert it to safetensors"
        )
    try:
        state = torch.load(str(path), weights_only=True, mmap=True, map_location="cpu")
    except pickle.UnpicklingError as error:
        raise CorruptFileError(
            f"{path} holds objects other than tensors, which eagle-hal refuses to unpickle: "
            f"{str(error).splitlines()[0] if str(error) else error!r}"
        ) from error
    except Exception as error:  # torch's loader fails on malformed files with any type
        raise CorruptFileError(f"{path} is not a readable PyTorch checkpoint: {error}") from error
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise CorruptFileError(
            f"{path} does not hold a flat mapping of tensor names to tensors (a state_dict)"
        )
    return state
