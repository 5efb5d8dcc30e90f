"""Splitting a Llama-family model over tensor-parallel ranks, and loading it shard by shard.

The split is applied to the model from outside (``model/llama.py`` knows nothing of it):
in every decoder layer Q/K/V and gate/up become column-parallel (this rank's heads and
intermediate channels), o and down row-parallel (one all-reduce each), the embedding and
``lm_head`` vocabulary-parallel. Norms, rotary tables and biases of row-parallel layers
are replicated. The draft head is not split: it runs replicated on every rank, reading the
target's (vocabulary-parallel) embedding and ``lm_head`` through their modules.

Weights never exist whole on a rank: ``sharded_llama`` builds the skeleton on the meta
device and ``load_sharded_weights`` copies each checkpoint tensor's slice as the reader
yields it (safetensors files are read slice-wise, not whole).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.layers import RotaryEmbedding
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.parallel.context import ParallelContext, ShardingError
from eagle_hal.parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    VocabParallelEmbedding,
    VocabParallelLMHead,
    sharded_parameters,
)

__all__ = [
    "check_shardable",
    "load_sharded_hf_model",
    "load_sharded_target",
    "load_sharded_weights",
    "model_config_at",
    "shard_llama",
    "sharded_llama",
]


def check_shardable(config: ModelConfig, world_size: int) -> None:
    """Raise ``ShardingError`` unless heads, KV heads and MLP width split evenly over
    ``world_size`` ranks (the vocabulary always splits: it is padded)."""
    for what, total in (
        ("attention heads", config.num_heads),
        ("key/value heads", config.num_kv_heads),
        ("the MLP intermediate size", config.intermediate_size),
    ):
        if total % world_size:
            raise ShardingError(
                f"the model's {what} ({total}) do not split over {world_size} "
                f"tensor-parallel ranks; choose a --tp that divides {total}"
            )


def sharded_llama(
    config: ModelConfig,
    context: ParallelContext,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> LlamaForCausalLM:
    """This rank's part of a Llama-family model, parameters uninitialised (fill them with
    ``load_sharded_weights``). The model carries ``context`` as ``model.parallel``.
    Raises ``ShardingError`` when the model does not split over ``context.world_size``."""
    check_shardable(config, context.world_size)
    model = LlamaForCausalLM(config, dtype=dtype, device="meta")
    hidden, head_dim = config.hidden_size, config.head_dim
    with torch.device("meta"):
        model.model.embed_tokens = VocabParallelEmbedding(config.vocab_size, hidden, context)
        model.lm_head = VocabParallelLMHead(hidden, config.vocab_size, context)
        for layer in model.model.layers:
            attention, mlp = layer.self_attn, layer.mlp
            bias = config.attention_bias
            attention.q_proj = ColumnParallelLinear(
                hidden, config.num_heads * head_dim, bias, context
            )
            attention.k_proj = ColumnParallelLinear(
                hidden, config.num_kv_heads * head_dim, bias, context
            )
            attention.v_proj = ColumnParallelLinear(
                hidden, config.num_kv_heads * head_dim, bias, context
            )
            attention.o_proj = RowParallelLinear(
                config.num_heads * head_dim, hidden, config.attention_out_bias, context
            )
            attention.num_heads = config.num_heads // context.world_size
            attention.num_kv_heads = config.num_kv_heads // context.world_size
            mlp.gate_proj = ColumnParallelLinear(hidden, config.intermediate_size, False, context)
            mlp.up_proj = ColumnParallelLinear(hidden, config.intermediate_size, False, context)
            mlp.down_proj = RowParallelLinear(config.intermediate_size, hidden, False, context)
    model.to(dtype)  # still on meta: free; then allocate each shard once, in its dtype
    model.to_empty(device=device)
    if config.tie_word_embeddings:  # to_empty made separate tensors; tie them again
        model.lm_head.weight = model.model.embed_tokens.weight
    model.rotary = RotaryEmbedding(config, device)
    model.parallel = context
    return model


def load_sharded_weights(
    model: LlamaForCausalLM, tensors: Iterable[tuple[str, torch.Tensor]], source: str
) -> None:
    """Fill a ``sharded_llama`` from full checkpoint tensors, keeping each one's slice for
    this rank (one tensor in memory at a time). Same checks and errors as
    ``LlamaForCausalLM.load_weights``."""
    specs = sharded_parameters(model)

    def slices() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in tensors:
            spec = specs.get(name)
            yield name, tensor if spec is None else spec.take(tensor)

    model.load_weights(slices(), source)


def shard_llama(model: LlamaForCausalLM, context: ParallelContext) -> LlamaForCausalLM:
    """This rank's part of an already built (whole) model, as a new model on its device."""
    sharded = sharded_llama(model.config, context, model.dtype, model.device)
    load_sharded_weights(sharded, model.state_dict().items(), source="an in-memory model")
    return sharded.eval()


def _safetensors_slices(
    files: list[Path], model: LlamaForCausalLM
) -> Iterator[tuple[str, torch.Tensor]]:
    """``(name, this rank's slice)`` read lazily: only the slice's bytes are read."""
    from safetensors import safe_open

    specs = sharded_parameters(model)
    for path in files:
        with safe_open(str(path), framework="pt", device="cpu") as handle:
            for name in handle.keys():  # noqa: SIM118 - safe_open is not a Mapping
                spec = specs.get(name)
                if spec is None:
                    yield name, handle.get_tensor(name)
                    continue
                lazy = handle.get_slice(name)
                yield name, spec.pad(lazy[spec.index(len(lazy.get_shape()))])


def model_config_at(path: str | Path | None) -> ModelConfig:
    """The ``ModelConfig`` of a model directory, a GGUF file, a hub id or (``None``) the
    default model, read without loading any weight."""
    from eagle_hal.model.loading import read_target_config

    return read_target_config(path)[0]


def load_sharded_hf_model(
    directory: str | Path,
    context: ParallelContext,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
) -> LlamaForCausalLM:
    """This rank's shard of a Hugging Face model directory, read slice-wise from its
    safetensors. Raises what ``load_hf_model`` raises, and ``ShardingError``."""
    from eagle_hal.model.loading.hf import read_json, safetensors_files

    directory = Path(directory)
    config = ModelConfig.from_hf_config(read_json(directory / "config.json"),
                                        source=str(directory / "config.json"))
    model = sharded_llama(config, context, dtype, device)
    model.load_weights(_safetensors_slices(safetensors_files(directory), model), str(directory))
    return model.eval()


def load_sharded_target(
    path: str | Path | None,
    context: ParallelContext,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    progress: bool = True,
) -> tuple[LlamaForCausalLM, Any]:
    """As ``eagle_hal.model.loading.load_target``, but only this rank's shard of every
    weight is loaded: ``(sharded target, tokenizer)``. HF safetensors are read slice-wise;
    GGUF tensors are dequantised one at a time and sliced. Raises what ``load_target``
    raises, and ``ShardingError``."""
    from eagle_hal.model.errors import ModelFileNotFound
    from eagle_hal.model.hub import resolve_target
    from eagle_hal.model.loading import Tokenizer, default_model_path
    from eagle_hal.model.loading.gguf import gguf_reader, iter_gguf_tensors

    path = default_model_path() if path is None else resolve_target(path, progress=progress)
    if path.is_dir():
        model = load_sharded_hf_model(path, context, dtype, device)
        return model, Tokenizer.from_hf_dir(path, eos_token_ids=model.config.eos_token_ids)
    if path.is_file():
        reader = gguf_reader(path)
        config = ModelConfig.from_gguf_metadata(reader, source=str(path))
        model = sharded_llama(config, context, dtype, device)
        load_sharded_weights(model, iter_gguf_tensors(reader, config, progress), str(path))
        return model.eval(), Tokenizer.from_gguf(reader)
    raise ModelFileNotFound(f"{path} is neither a model directory nor a GGUF file")
