"""GGUF files (llama.cpp's format): metadata -> ``ModelConfig``, tensors dequantised to torch.

Tensors are dequantised with the ``gguf`` package (``gguf.quants.dequantize``), renamed to
Hugging Face names, and — for ``llama``-architecture files — their Q/K rows are put back in
Hugging Face order: llama.cpp's converter interleaves each head's two rotary halves
(row ``i`` of half ``h`` goes to ``2 * i + h``) because its kernel rotates adjacent pairs.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.errors import ModelFileNotFound, ModelLoadError, UnsupportedModelError
from eagle_hal.model.llama import LlamaForCausalLM

__all__ = [
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
_BLOCK_TENSOR = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)")
_CONSUMED_BY_CONFIG = frozenset({"rope_freqs.weight"})


def gguf_reader(path: str | Path) -> Any:
    """Open a GGUF file (memory-mapped). Raises ``ModelFileNotFound`` or, when the optional
    ``gguf`` package is missing or the file is not GGUF, ``ModelLoadError``."""
    path = Path(path)
    if not path.is_file():
        raise ModelFileNotFound(f"GGUF file {path} does not exist")
    try:
        import gguf
    except ImportError as error:
        raise ModelLoadError(
            "reading GGUF files needs the 'gguf' package: pip install 'eagle-hal[gguf]'"
        ) from error
    try:
        return gguf.GGUFReader(str(path))
    except (ValueError, OSError) as error:
        raise ModelLoadError(f"{path} is not a readable GGUF file: {error}") from error


def hf_tensor_name(gguf_name: str) -> str | None:
    """The Hugging Face name of a GGUF tensor; ``None`` for tensors the config consumed.
    Raises ``UnsupportedModelError`` for a tensor with no Llama-family counterpart."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    if gguf_name in _CONSUMED_BY_CONFIG:
        return None
    match = _BLOCK_TENSOR.fullmatch(gguf_name)
    if match and match.group(2) in _BLOCK_NAMES:
        layer, kind, suffix = match.groups()
        return f"model.layers.{layer}.{_BLOCK_NAMES[kind]}.{suffix}"
    raise UnsupportedModelError(f"GGUF tensor {gguf_name!r} has no Llama-family counterpart")


def _unpermute_rotary_rows(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row interleaving for ``num_heads`` heads (weight or bias)."""
    rows = weight.shape[0]
    half = rows // num_heads // 2
    restored = weight.reshape(num_heads, half, 2, *weight.shape[1:]).swapaxes(1, 2)
    return restored.reshape(weight.shape)


def iter_gguf_tensors(
    reader: Any, config: ModelConfig, progress: bool = True
) -> Iterator[tuple[str, torch.Tensor]]:
    """Yield ``(hf_name, float32 tensor)`` for every GGUF tensor, dequantised, with Q/K rows
    restored to Hugging Face order for llama-architecture files. ``progress`` shows a tqdm
    bar on stderr."""
    from gguf.quants import dequantize
    from tqdm import tqdm

    unpermute = config.architecture == "llama"
    heads = {"attn_q": config.num_heads, "attn_k": config.num_kv_heads}
    bar = tqdm(reader.tensors, desc="dequantising GGUF", unit=" tensors", leave=False,
               disable=not progress)
    for tensor in bar:
        name = hf_tensor_name(tensor.name)
        if name is None:
            continue
        values = dequantize(tensor.data, tensor.tensor_type)
        values = values.reshape(tuple(int(d) for d in reversed(tensor.shape)))  # torch order
        kind = tensor.name.split(".")[2] if tensor.name.startswith("blk.") else ""
        if unpermute and kind in heads:
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

    Raises ``ModelFileNotFound``, ``UnsupportedModelError`` (architecture or tensor) and the
    tensor-mismatch ``ModelLoadError``s.
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
    config = ModelConfig.from_gguf_metadata(reader)
    model = LlamaForCausalLM(config, dtype=dtype, device=device)
    model.load_weights(iter_gguf_tensors(reader, config, progress), source=source)
    return model.eval()
