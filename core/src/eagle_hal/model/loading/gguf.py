"""GGUF files (llama.cpp's format): metadata -> ``ModelConfig``, tensors dequantised to torch.

Tensors are dequantised with the ``gguf`` package (``gguf.quants.dequantize``), renamed to
Hugging Face names, and — for ``llama``-architecture files — their Q/K rows are put back in
Hugging Face order: llama.cpp's converter interleaves each head's two rotary halves
(row ``i`` of half ``h`` goes to ``2 * i + h``) because its kernel rotates adjacent pairs.

The ``gguf`` reader trusts every count, length and offset in a file (a corrupt array
length can keep it looping, a tensor offset can point past the end). ``gguf_reader`` walks
the header itself first, checking each of them against the file's size, and hands the
file to the reader only when all fit; anything the reader still rejects becomes a
``CorruptFileError`` naming the file.

Gemma 3 files (``gemma3``) name their norms differently (``ffn_norm`` is the pre-MLP norm
of its sandwich, ``post_ffw_norm`` the one after) and store each norm weight as ``1 + w``,
the scale the model's norms multiply by, so they load as they are.
"""

from __future__ import annotations

import mmap
import re
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.errors import (
    CorruptFileError,
    ModelFileNotFound,
    ModelLoadError,
    UnsupportedModelError,
)
from eagle_hal.model.llama import LlamaForCausalLM, check_llama_checkpoint

__all__ = [
    "check_gguf_layout",
    "gguf_reader",
    "hf_tensor_name",
    "iter_gguf_tensors",
    "load_gguf_model",
    "model_from_gguf_reader",
]

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
# Gemma 3's sandwich norms and q/k norms: ``ffn_norm`` is its pre-MLP norm there
_GEMMA3_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
    "post_attention_norm": "post_attention_layernorm",
    "ffn_norm": "pre_feedforward_layernorm",
    "post_ffw_norm": "post_feedforward_layernorm",
}
_QWEN3_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm",
}
# Phi-3 keeps Hugging Face's fused projections: the loader splits them as it does for HF
_PHI3_BLOCK_NAMES = {
    **_BLOCK_NAMES,
    "attn_qkv": "self_attn.qkv_proj",
    "ffn_up": "mlp.gate_up_proj",
}
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_CONSUMED_BY_CONFIG = frozenset({"rope_freqs.weight"})


def gguf_reader(path: str | Path) -> Any:
    """Open a GGUF file (memory-mapped) after checking its header against its size. Raises
    ``ModelFileNotFound``, ``CorruptFileError`` (unreadable, empty, truncated or malformed
    file) or, when the optional ``gguf`` package is missing, ``ModelLoadError``."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileNotFound(f"GGUF file {path} does not exist")
    try:
        import gguf
    except ImportError as error:
        raise ModelLoadError(
            "reading GGUF files needs the 'gguf' package: pip install 'eagle-hal[gguf]'"
        ) from error
    check_gguf_layout(path)
    try:
        return gguf.GGUFReader(str(path))
    except Exception as error:  # the reader signals bad input with many builtin types
        raise CorruptFileError(f"{path} is not a readable GGUF file: {error}") from error


# GGUF value types (gguf.GGUFValueType) -> size of one scalar; 8 is STRING, 9 ARRAY.
_SCALAR_BYTES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
_STRING, _ARRAY, _UINT32 = 8, 9, 4
_MAX_DIMS = 4  # GGML_MAX_DIMS
_MAX_ARRAY_NESTING = 2


def check_gguf_layout(path: Path) -> None:
    """Walk a GGUF header (version 2 or 3, either byte order) and check that every
    metadata count, string length, array length, tensor dimension and tensor byte range
    fits within the file, before anything sized by them is read or allocated. Raises
    ``CorruptFileError`` naming ``path`` and the first thing that does not fit."""
    try:
        with path.open("rb") as handle:
            size = path.stat().st_size
            if size < 24:
                raise CorruptFileError(
                    f"{path} is {size} bytes, too short for a GGUF header (magic, version "
                    "and two counts); is it empty or truncated?"
                )
            with mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as data:
                _GGUFLayout(data, size, path).check()
    except OSError as error:
        raise CorruptFileError(f"{path} cannot be read: {error}") from error


class _GGUFLayout:
    def __init__(self, data: Any, size: int, path: Path) -> None:
        self.data, self.size, self.path = data, size, path
        self.order = "<"
        self.offset = 0

    def fail(self, what: str) -> CorruptFileError:
        return CorruptFileError(
            f"{self.path} is not a readable GGUF file: {what} (at byte {self.offset} of "
            f"{self.size}); the file is truncated or corrupt"
        )

    def take(self, fmt: str) -> int:
        width = struct.calcsize(fmt)
        if self.offset + width > self.size:
            raise self.fail("the header runs past the end of the file")
        (value,) = struct.unpack_from(self.order + fmt, self.data, self.offset)
        self.offset += width
        return int(value)

    def skip(self, count: int, width: int, what: str) -> None:
        if count * width > self.size - self.offset:
            raise self.fail(f"{what} of {count:,} x {width} bytes does not fit in the file")
        self.offset += count * width

    def text(self, what: str) -> str:
        length = self.take("Q")
        start = self.offset
        self.skip(length, 1, f"{what} length")
        try:
            return bytes(self.data[start:self.offset]).decode("utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(f"{what} is not UTF-8 ({error})") from error

    def check(self) -> None:
        if bytes(self.data[:4]) != b"GGUF":
            raise self.fail("no GGUF magic at the start")
        self.offset = 4
        version = self.take("I")
        if version & 0xFFFF == 0:  # written on a machine of the other byte order
            self.order = ">"
            self.offset = 4
            version = self.take("I")
        if version not in (2, 3):
            raise self.fail(f"GGUF version {version} is not supported (2 or 3 are)")
        tensor_count, kv_count = self.take("Q"), self.take("Q")
        # each metadata entry takes at least 13 bytes, each tensor description 24
        if kv_count * 13 + tensor_count * 24 > self.size - self.offset:
            raise self.fail(
                f"{kv_count:,} metadata entries and {tensor_count:,} tensors cannot fit"
            )
        keys: set[str] = set()
        alignment = 32
        for _ in range(kv_count):
            key = self.text("a metadata key")
            if key in keys:
                raise self.fail(f"metadata key {key!r} appears twice")
            keys.add(key)
            kind = self.take("I")
            if key == "general.alignment":
                if kind != _UINT32:
                    raise self.fail("general.alignment is not a uint32")
                alignment = self.take("I")
                if alignment == 0 or alignment & (alignment - 1):
                    raise self.fail(f"alignment {alignment} is not a power of two")
                continue
            self.value(kind, key, 0)
        names: set[str] = set()
        described = [self.tensor_info(names) for _ in range(tensor_count)]
        start = self.offset + (-self.offset) % alignment
        for name, offset, nbytes in described:
            if start + offset + nbytes > self.size:
                raise self.fail(
                    f"tensor {name!r} claims bytes [{start + offset}, {start + offset + nbytes})"
                )

    def value(self, kind: int, key: str, depth: int) -> None:
        if kind in _SCALAR_BYTES:
            self.skip(1, _SCALAR_BYTES[kind], f"metadata {key!r}")
        elif kind == _STRING:
            self.text(f"metadata {key!r}")
        elif kind == _ARRAY and depth < _MAX_ARRAY_NESTING:
            item, count = self.take("I"), self.take("Q")
            if item in _SCALAR_BYTES:
                self.skip(count, _SCALAR_BYTES[item], f"metadata {key!r} array")
                return
            if count * 8 > self.size - self.offset:  # strings and arrays take 8+ bytes each
                raise self.fail(f"metadata {key!r} array of {count:,} items does not fit")
            for _ in range(count):
                self.value(item, key, depth + 1)
        else:
            raise self.fail(f"metadata {key!r} has unknown value type {kind}")

    def tensor_info(self, names: set[str]) -> tuple[str, int, int]:
        from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

        name = self.text("a tensor name")
        if name in names:
            raise self.fail(f"tensor {name!r} is described twice")
        names.add(name)
        dims_count = self.take("I")
        if not 1 <= dims_count <= _MAX_DIMS:
            raise self.fail(f"tensor {name!r} has {dims_count} dimensions (1 to 4 allowed)")
        dims = [self.take("Q") for _ in range(dims_count)]
        raw_type = self.take("I")
        offset = self.take("Q")
        try:
            block, type_bytes = GGML_QUANT_SIZES[GGMLQuantizationType(raw_type)]
        except (ValueError, KeyError) as error:
            raise self.fail(f"tensor {name!r} has unknown type {raw_type}") from error
        if min(dims) < 1 or dims[0] % block:
            raise self.fail(
                f"tensor {name!r} has dimensions {dims}, not positive rows of whole "
                f"{block}-value blocks"
            )
        elements = 1
        for dim in dims:
            elements *= dim
            if elements // block * type_bytes > self.size:
                raise self.fail(f"tensor {name!r} of dimensions {dims} exceeds the file")
        return name, offset, elements // block * type_bytes


def hf_tensor_name(gguf_name: str, architecture: str = "llama") -> str | None:
    """The Hugging Face name of a GGUF tensor of a file of ``architecture``; ``None`` for
    tensors the config consumed. Raises ``UnsupportedModelError`` for a tensor with no
    Llama-family counterpart."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if gguf_name in _CONSUMED_BY_CONFIG:
        return None
    names = {"gemma3": _GEMMA3_BLOCK_NAMES, "qwen3": _QWEN3_BLOCK_NAMES,
             "phi3": _PHI3_BLOCK_NAMES}.get(architecture, _BLOCK_NAMES)
    match = _BLOCK_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in names:
        layer, kind, suffix = match.groups()
        return f"model.layers.{layer}.{names[kind]}.{suffix}"
    raise UnsupportedModelError(f"GGUF tensor {gguf_name!r} has no Llama-family counterpart")


def _unpermute_rotary_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row interleaving for ``num_heads`` heads (weight or bias)."""
    rows = weight.shape[0]
    half = rows // num_heads // 2
    restored = weight.reshape(num_heads, half, 2, *weight.shape[1:]).swapaxes(1, 2)
    return restored.reshape(weight.shape)


def iter_gguf_tensors(
    reader: Any, config: ModelConfig, progress: bool = True, source: str = "GGUF file"
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, float32 tensor)`` for every GGUF tensor, dequantised, with Q/K rows
    restored to Hugging Face order for llama-architecture files. ``progress`` shows a tqdm
    bar on stderr. A tensor that cannot be dequantised raises ``CorruptFileError`` naming
    ``source``."""
    from gguf.quants import dequantize
    from tqdm import tqdm

    unpermute = config.architecture == "llama"
    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}
    bar = tqdm(reader.tensors, desc="dequantising GGUF", unit=" tensors", leave=False,
               disable=not progress)
    for tensor in bar:
        name = hf_tensor_name(tensor.name, config.architecture)
        if name is None:
            continue
        try:
            values = dequantize(tensor.data, tensor.tensor_type)
            values = values.reshape(tuple(int(d) for d in reversed(tensor.shape)))  # torch order
        except Exception as error:  # gguf.quants signals bad data with builtin types
            raise CorruptFileError(
                f"tensor {tensor.name!r} of {source} cannot be dequantised: {error}"
            ) from error
        kind = tensor.name.split(".")[2] if tensor.name.startswith("blk.") else ""
        # rows that do not split into the heads' two rotary halves cannot be the model's
        # (its rows are heads x an even head_dim): left as they are, they fail the shape check
        if unpermute and kind in heads and values.shape[0] % (2 * heads[kind]) == 0:
            values = _unpermute_rotary_rows(values, heads[kind])
        values = np.ascontiguousarray(values, dtype=np.float32)
        if not values.flags.writeable:  # F32 tensors are views of the read-only memory map
            values = values.copy()
        yield name, torch.from_numpy(values)


def load_gguf_model(
    path: str | Path,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> LlamaForCausalLM:
    """Build a ``LlamaForCausalLM`` from a GGUF file, dequantising every tensor.

    Raises ``ModelFileNotFound``, ``CorruptFileError`` (unreadable or malformed file),
    ``InvalidConfigError`` (metadata of the wrong type or range, or describing more
    parameters than the file holds), ``UnsupportedModelError`` (architecture or tensor)
    and the tensor-mismatch ``ModelLoadError``s.
    """
    return model_from_gguf_reader(gguf_reader(path), dtype, device, str(path), progress)


def model_from_gguf_reader(
    reader: Any,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    source: str = "GGUF file",
    progress: bool = True,
) -> LlamaForCausalLM:
    """As ``load_gguf_model``, from an open reader (opening a GGUF parses all its metadata,
    which is worth doing once when the tokenizer is read from the same file)."""
    config = ModelConfig.from_gguf_metadata(reader, source=source)
    shapes = {}
    for tensor in reader.tensors:
        name = hf_tensor_name(tensor.name, config.architecture)
        if name is not None:
            shapes[name] = tuple(int(d) for d in reversed(tensor.shape))  # torch order
    check_llama_checkpoint(config, shapes, source)
    model = LlamaForCausalLM(config, dtype=dtype, device=device)
    model.load_weights(iter_gguf_tensors(reader, config, progress, source), source=source)
    return model.eval()
