"""Writing tiny models in llama.cpp's GGUF layout, as its converter names their tensors.

The oracle of the tiny-GGUF tests is the transformers model that was written: each test
gives its architecture's block names (HF module path -> llama.cpp tensor kind)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np

_TOP = {"model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
        "lm_head.weight": "output.weight"}


def llama_cpp_name(name: str, blocks: Mapping[str, str]) -> str:
    """llama.cpp's name of the HF tensor ``name``: ``model.layers.<i>.<module>.weight``
    becomes ``blk.<i>.<blocks[module]>.weight``."""
    if name in _TOP:
        return _TOP[name]
    parts = name.split(".")  # model.layers.<i>.<module...>.weight
    return f"blk.{parts[2]}.{blocks['.'.join(parts[3:-1])]}.weight"


def write_tensors(writer, tensors: Iterable[tuple[str, np.ndarray]],
                  blocks: Mapping[str, str]) -> None:
    """Add ``tensors`` (HF names, float32 values) under llama.cpp's names, then write and
    close the file."""
    for name, values in tensors:
        writer.add_tensor(llama_cpp_name(name, blocks),
                          np.ascontiguousarray(values, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
