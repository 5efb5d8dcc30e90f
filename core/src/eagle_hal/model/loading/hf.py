"""Hugging Face model directories: ``config.json`` plus single or sharded safetensors.

Only safetensors are read. A directory with PyTorch ``.bin`` weights only is refused:
unpickling runs arbitrary code. Convert such a checkpoint once with transformers:
``AutoModelForCausalLM.from_pretrained(DIR).save_pretrained(OUT, safe_serialization=True)``.

Every safetensors header is read and checked here before the ``safetensors`` library
opens the file: the header length against the file size, then each tensor's dtype, shape
and byte range against the data that follows. A file that fails raises
``CorruptFileError`` naming it, so no size read from a file is trusted before it is
known to fit that file.
"""

from __future__ import annotations

import dataclasses
import json
import math
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.errors import CorruptFileError, ModelFileNotFound, ModelLoadError
from eagle_hal.model.llama import LlamaForCausalLM, check_llama_checkpoint

__all__ = [
    "SafetensorsTensor",
    "iter_safetensors",
    "load_hf_model",
    "read_json",
    "read_safetensors_header",
    "safetensors_files",
    "safetensors_tensors",
]

_SINGLE_FILE = "model.safetensors"
_SHARD_INDEX = "model.safetensors.index.json"
# The safetensors library refuses larger headers; refusing them here too keeps a lying
# length field from making us read (and allocate) that much.
_MAX_HEADER_BYTES = 100_000_000
_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E5M2": 1, "F8_E4M3": 1, "F8_E8M0": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}


def read_json(path: Path) -> dict[str, Any]:
    """Parse a JSON object file. Raises ``ModelFileNotFound`` if absent and
    ``CorruptFileError`` if unreadable, empty, not UTF-8, not JSON or not an object."""
    if not path.is_file():
        raise ModelFileNotFound(f"{path} does not exist")
    try:
        data = path.read_bytes()
    except OSError as error:
        raise CorruptFileError(f"{path} cannot be read: {error}") from error
    if not data.strip():
        raise CorruptFileError(f"{path} is empty; expected a JSON object")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise CorruptFileError(f"{path} is not UTF-8 text: {error}") from error
    try:
        parsed = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        raise CorruptFileError(f"{path} is not valid JSON: {error}") from error
    if not isinstance(parsed, dict):
        raise CorruptFileError(
            f"{path} must hold a JSON object, not a JSON {type(parsed).__name__}"
        )
    return parsed


@dataclasses.dataclass(frozen=True, slots=True)
class SafetensorsTensor:
    """One tensor entry of a checked safetensors header."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


def read_safetensors_header(path: Path) -> dict[str, SafetensorsTensor]:
    """The tensors a safetensors file declares, after checking its header against the file:
    the 8-byte header length fits the file, the header is a UTF-8 JSON object, and every
    tensor has a known dtype, a shape of non-negative integers and a byte range inside the
    data whose length is dtype size x element count. Raises ``ModelFileNotFound`` or
    ``CorruptFileError`` naming ``path`` and what is wrong."""
    if not path.is_file():
        raise ModelFileNotFound(f"safetensors file {path} does not exist")
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            if size < 8:
                raise CorruptFileError(
                    f"{path} is {size} bytes, too short for a safetensors file (an 8-byte "
                    "header length, then the header); is it truncated?"
                )
            (length,) = struct.unpack("<Q", handle.read(8))
            if length > size - 8:
                raise CorruptFileError(
                    f"{path}: the header length field says {length:,} bytes, but only "
                    f"{size - 8:,} follow it; the file is truncated or not safetensors"
                )
            if length > _MAX_HEADER_BYTES:
                raise CorruptFileError(
                    f"{path}: header of {length:,} bytes exceeds the {_MAX_HEADER_BYTES:,} "
                    "bytes safetensors allows"
                )
            raw = handle.read(length)
    except OSError as error:
        raise CorruptFileError(f"{path} cannot be read: {error}") from error
    if len(raw) != length:
        raise CorruptFileError(f"{path} shrank while its header was read")
    try:
        header = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise CorruptFileError(f"{path}: the safetensors header is not UTF-8: {error}") from error
    except (json.JSONDecodeError, RecursionError) as error:
        raise CorruptFileError(
            f"{path}: the safetensors header is not valid JSON: {error}"
        ) from error
    if not isinstance(header, dict):
        raise CorruptFileError(f"{path}: the safetensors header is not a JSON object")
    return _checked_entries(path, header, data_bytes=size - 8 - length)


def _checked_entries(
    path: Path, header: dict[str, Any], data_bytes: int
) -> dict[str, SafetensorsTensor]:
    tensors: dict[str, SafetensorsTensor] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(
                isinstance(v, str) for v in entry.values()
            ):
                raise CorruptFileError(f"{path}: __metadata__ must map strings to strings")
            continue
        if not isinstance(entry, dict):
            raise CorruptFileError(f"{path}: header entry {name!r} is not an object")
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if dtype not in _DTYPE_BYTES:
            raise CorruptFileError(f"{path}: tensor {name!r} has unknown dtype {dtype!r}")
        if not isinstance(shape, list) or not all(_is_count(d) for d in shape):
            raise CorruptFileError(
                f"{path}: tensor {name!r} has shape {shape!r}, not a list of non-negative "
                "integers"
            )
        if (not isinstance(offsets, list) or len(offsets) != 2
                or not all(_is_count(o) for o in offsets)):
            raise CorruptFileError(
                f"{path}: tensor {name!r} has data_offsets {offsets!r}, not [begin, end]"
            )
        begin, end = offsets
        if not begin <= end <= data_bytes:
            raise CorruptFileError(
                f"{path}: tensor {name!r} claims bytes [{begin}, {end}) of a data section "
                f"of {data_bytes} bytes; the file is truncated or its header is corrupt"
            )
        tensor = SafetensorsTensor(dtype, tuple(shape))
        if end - begin != tensor.numel * _DTYPE_BYTES[dtype]:
            raise CorruptFileError(
                f"{path}: tensor {name!r} ({dtype} {list(shape)}) needs "
                f"{tensor.numel * _DTYPE_BYTES[dtype]} bytes, but its data_offsets span "
                f"{end - begin}"
            )
        tensors[name] = tensor
    return tensors


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def safetensors_tensors(paths: list[Path]) -> dict[str, SafetensorsTensor]:
    """The checked header entries of every file of ``paths``, merged. Raises
    ``CorruptFileError`` for a bad header or a tensor name held by two files."""
    merged: dict[str, SafetensorsTensor] = {}
    owner: dict[str, Path] = {}
    for path in paths:
        for name, tensor in read_safetensors_header(path).items():
            if name in merged:
                raise CorruptFileError(
                    f"tensor {name!r} is in both {owner[name]} and {path}"
                )
            merged[name], owner[name] = tensor, path
    return merged


def safetensors_files(directory: Path) -> list[Path]:
    """The safetensors files of a model directory: the shards named by
    ``model.safetensors.index.json``, else ``model.safetensors``, else every ``*.safetensors``.
    Each file's header is checked against the file (``read_safetensors_header``). Raises
    ``ModelFileNotFound`` (naming what was looked for) when there is none and
    ``CorruptFileError`` for a malformed index or file."""
    index = directory / _SHARD_INDEX
    if index.is_file():
        paths = _indexed_shards(directory, index)
    elif (directory / _SINGLE_FILE).is_file():
        paths = [directory / _SINGLE_FILE]
    else:
        paths = sorted(p for p in directory.glob("*.safetensors") if p.is_file())
    if not paths:
        if any(directory.glob("*.bin")) or any(directory.glob("*.pt")):
            raise ModelLoadError(
                f"{directory} holds only PyTorch pickle weights (.bin/.pt), which eagle-hal "
                "does not load (unpickling can run code). Convert them to safetensors first: "
                "transformers' save_pretrained(out_dir, safe_serialization=True)."
            )
        raise ModelFileNotFound(
            f"no weights in {directory}: expected {_SINGLE_FILE} or {_SHARD_INDEX} with its "
            "shards"
        )
    for path in paths:
        read_safetensors_header(path)
    return paths


def _indexed_shards(directory: Path, index: Path) -> list[Path]:
    """The shards ``index`` names, each checked to exist inside ``directory`` and to hold
    the tensors the index places in it."""
    weight_map = read_json(index).get("weight_map")
    if not isinstance(weight_map, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in weight_map.items()
    ):
        raise CorruptFileError(f"{index}: 'weight_map' must map tensor names to shard files")
    if not weight_map:
        raise CorruptFileError(f"{index}: 'weight_map' lists no tensors")
    paths: dict[str, Path] = {}
    for shard in sorted(set(weight_map.values())):
        path = directory / shard
        # judged by name, not by resolving: hub caches link shards to blobs elsewhere
        if Path(shard).is_absolute() or ".." in Path(shard).parts or not shard:
            raise CorruptFileError(f"{index} names shard {shard!r} outside {directory}")
        if not path.is_file():
            raise ModelFileNotFound(f"shard {shard} listed in {index} does not exist")
        paths[shard] = path
    held = {shard: read_safetensors_header(path) for shard, path in paths.items()}
    for name, shard in weight_map.items():
        if name not in held[shard]:
            raise CorruptFileError(
                f"{index} places tensor {name!r} in {shard}, but {paths[shard]} does not hold it"
            )
    return list(paths.values())


def iter_safetensors(
    paths: list[Path], device: torch.device | str = "cpu"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(name, tensor)`` for every tensor of ``paths``, one at a time. Each header is
    checked before the file is opened; a failure of the ``safetensors`` library raises
    ``CorruptFileError`` naming the file."""
    from safetensors import safe_open

    for path in paths:
        read_safetensors_header(path)
        try:
            handle = safe_open(str(path), framework="pt", device=str(device))
        except Exception as error:  # the library's errors share no narrower base
            raise CorruptFileError(f"{path} is not a readable safetensors file: {error}") from error
        with handle:
            for name in list(handle.keys()):
                try:
                    tensor = handle.get_tensor(name)
                except Exception as error:  # as above
                    raise CorruptFileError(
                        f"tensor {name!r} of {path} cannot be read: {error}"
                    ) from error
                yield name, tensor


def load_hf_model(
    directory: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> LlamaForCausalLM:
    """Build a ``LlamaForCausalLM`` from an HF directory's ``config.json`` and safetensors.

    ``progress`` shows a tqdm bar on stderr. Raises ``ModelFileNotFound`` (missing
    directory, config or weights), ``CorruptFileError`` (unreadable or malformed files),
    ``InvalidConfigError`` (config values of the wrong type or range, or a config larger
    than the weights), ``UnsupportedModelError`` (architecture), ``TensorShapeMismatch`` /
    ``MissingTensorsError`` / ``UnexpectedTensorsError`` (weights not matching the config).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ModelFileNotFound(f"model directory {directory} does not exist")
    config_path = directory / "config.json"
    config = ModelConfig.from_hf_config(read_json(config_path), source=str(config_path))
    files = safetensors_files(directory)
    shapes = {name: t.shape for name, t in safetensors_tensors(files).items()}
    check_llama_checkpoint(config, shapes, str(directory))
    model = LlamaForCausalLM(config, dtype=dtype, device=device)
    tensors = _with_progress(iter_safetensors(files), directory, progress)
    model.load_weights(tensors, source=str(directory))
    return model.eval()


def _with_progress(
    tensors: Iterator[tuple[str, torch.Tensor]], directory: Path, progress: bool
) -> Iterator[tuple[str, torch.Tensor]]:
    from tqdm import tqdm

    yield from tqdm(
        tensors, desc=f"loading {_display_name(directory)}", unit=" tensors", leave=False,
        disable=not progress,
    )


def _display_name(directory: Path) -> str:
    """``org/name`` for a hub cache snapshot (``models--org--name/snapshots/<sha>``), else
    the directory's own name."""
    if directory.parent.name == "snapshots" and directory.parent.parent.name.startswith(
            "models--"):
        return directory.parent.parent.name[len("models--"):].replace("--", "/")
    return directory.name
