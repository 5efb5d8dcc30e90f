"""The Llama family (Llama 2/3, SmolLM2, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2 and 3) as one
implementation.

Variants are ``ModelConfig`` flags: QKV bias (Qwen2), per-head q/k RMSNorm (Qwen3, Gemma 3),
tied embeddings (SmolLM2), rotary scaling (Llama 3.1+), GQA everywhere; Gemma 3 adds an
embedding scale, norms after attention and MLP too (``SandwichDecoderLayer``), a GELU-tanh
MLP and local layers with their own rotary base; Gemma 2 is that block without the q/k norm,
with soft-capped attention scores (through the attention backend) and final logits.
Sliding windows reach the backend per layer (``AttentionConfig.layer_windows``). Parameter
names equal
Hugging Face's (``model.layers.{i}.self_attn.q_proj.weight`` ...), so HF checkpoints load
by name; Phi-3's fused ``qkv_proj`` and ``gate_up_proj`` tensors are split into those
names as they load.

The model computes through an ``AttentionBackend`` and never knows the device. Besides the
final hidden states (EAGLE-1's feature) it can return the residual stream entering chosen
layers (EAGLE-3's features).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from typing import NamedTuple

import torch
from torch import nn

from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, ForwardBatch, KVStore
from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.model.config import ModelConfig, RopeScaling
from eagle_hal.model.errors import InvalidConfigError, TensorShapeMismatch
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.model.layers import (
    DecoderLayer,
    RMSNorm,
    RotaryEmbedding,
    SandwichDecoderLayer,
    lm_head_logits,
)
from eagle_hal.model.weights import check_fits, load_named_tensors
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

__all__ = ["LlamaForCausalLM", "ModelOutput", "check_llama_checkpoint"]

_FUSED_NAME = re.compile(
    r"(?P<prefix>.+)\.(?P<module>self_attn\.qkv_proj|mlp\.gate_up_proj)\.(?P<kind>weight|bias)"
)


def _stream(hidden: torch.Tensor, residual: torch.Tensor | None) -> torch.Tensor:
    return hidden if residual is None else hidden + residual


class ModelOutput(NamedTuple):
    """What a target forward returns."""

    hidden_states: torch.Tensor  # [T, hidden] after the final norm (EAGLE-1's feature)
    aux_hidden_states: tuple[torch.Tensor, ...]  # each [T, hidden], in aux_layers order


class _LlamaModel(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        layer = SandwichDecoderLayer if config.sandwich_norms else DecoderLayer
        self.layers = nn.ModuleList(layer(config, i) for i in range(config.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)


class LlamaForCausalLM(nn.Module):
    """A Llama-family causal LM whose parameters live on ``device`` in ``dtype``.

    Parameters are uninitialised after construction; fill them with ``load_weights`` (or
    the loaders in ``eagle_hal.model.loading``). The model stays on the device it was built
    for (its rotary table does not follow ``.to()``).
    """

    def __init__(
        self,
        config: ModelConfig,
        dtype: torch.dtype = torch.float32,
        device: torch.device | str = "cpu",
    ) -> None:
        super().__init__()
        self.config = config
        with torch.device("meta"):  # no random init: the checkpoint overwrites everything
            self.model = _LlamaModel(config)
            self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.to_empty(device=device)
        self.to(dtype)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.rotary = RotaryEmbedding(config, device)
        # Gemma 3's local-attention layers rotate with their own base and no scaling
        self.local_rotary: RotaryEmbedding | None = None
        if config.sliding_layers and config.local_rope_theta is not None:
            local = dataclasses.replace(
                config, rope_theta=config.local_rope_theta, rope_scaling=RopeScaling())
            self.local_rotary = RotaryEmbedding(local, device)

    @property
    def dtype(self) -> torch.dtype:
        return self.lm_head.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.lm_head.weight.device

    def attention_config(self, kv_store: KVStore, req_to_token: torch.Tensor) -> AttentionConfig:
        """The ``AttentionConfig`` an attention backend for this model is built from."""
        return AttentionConfig(
            num_heads=self.config.num_heads,
            num_kv_heads=self.config.num_kv_heads,
            head_dim=self.config.head_dim,
            num_layers=self.config.num_layers,
            scaling=self.config.head_dim**-0.5,  # another scale is applied to q (Attention)
            kv_store=kv_store,
            req_to_token=req_to_token,
            layer_windows=self.config.layer_windows,
            logit_softcap=self.config.attn_logit_softcap,
        )

    def embed(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Token embeddings ``[T, hidden]`` of ``input_ids`` ``[T]``, scaled by
        ``config.embedding_scale`` (Gemma's sqrt(hidden), rounded to the embeddings' dtype
        first as Hugging Face does)."""
        embeds = self.model.embed_tokens(input_ids)
        if self.config.embedding_scale != 1.0:
            embeds = embeds * torch.tensor(self.config.embedding_scale, dtype=embeds.dtype)
        return embeds

    def forward(
        self,
        batch: ForwardBatch,
        attn: AttentionBackend,
        aux_layers: tuple[int, ...] = (),
        *,
        num_layers: int | None = None,
    ) -> ModelOutput:
        """Run every layer over ``batch`` (writing each layer's K/V through ``attn``), or
        only the first ``num_layers`` then the final norm: an early exit, whose hidden
        states the same ``lm_head`` reads (the self-drafter, ``speculative.self_draft``).

        ``aux_layers`` lists layer indices ``i`` in ``[0, num_layers]`` whose *input*
        residual stream to return, i.e. Hugging Face's ``output_hidden_states[i]`` (0 is the
        embeddings, ``num_layers`` the last layer's output before the final norm) — the
        convention of published EAGLE-3 heads. Plans ``batch.attn_metadata`` if the caller
        has not. Raises ``ValueError`` for an aux index out of range.
        """
        depth = self.config.num_layers if num_layers is None else num_layers
        num_layers = self.config.num_layers
        for index in aux_layers:
            if not 0 <= index <= num_layers:
                raise ValueError(f"aux layer {index} outside [0, {num_layers}]")
        if batch.attn_metadata is None:
            batch.attn_metadata = attn.plan(batch)
        hidden = self.embed(batch.input_ids)  # [T, hidden]
        residual: torch.Tensor | None = None  # the residual stream is hidden + residual
        rotary = self.rotary.cos_sin(batch.positions, hidden.dtype)
        local = rotary
        if self.local_rotary is not None:
            local = self.local_rotary.cos_sin(batch.positions, hidden.dtype)
        sliding = self.config.sliding_layers
        captured: dict[int, torch.Tensor] = {}
        for index, layer in enumerate(self.model.layers[:depth]):
            if index in aux_layers:
                hidden, residual = _stream(hidden, residual), None
                captured[index] = hidden
            layer_rotary = local if index in sliding else rotary
            hidden, residual = layer(hidden, residual, layer_rotary, batch, attn)
        if num_layers in aux_layers:
            hidden, residual = _stream(hidden, residual), None
            captured[num_layers] = hidden
        if residual is None:
            normed = self.model.norm(hidden)
        else:
            normed, _ = self.model.norm.add_norm(hidden, residual)
        return ModelOutput(normed, tuple(captured[i] for i in aux_layers))

    def fuse_for_inference(self, kernels: ModelKernels = REFERENCE_MODEL_KERNELS) -> None:
        """Q/K/V and gate/up as one GEMM each, ``kernels`` in every layer (see
        ``eagle_hal.model.fusion``). For inference only; names and loading are unchanged."""
        fuse_for_inference(kernels, self)

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[n, vocab]`` of normed hidden states ``[n, hidden]``. Calls the
        ``lm_head`` module, so a vocabulary-parallel head gathers its shards here; a plain
        one goes through the installed kernels' ``logits`` where they have one. Gemma 2's
        final soft-cap (``config.final_logit_softcap``) is applied in float32."""
        logits = lm_head_logits(self.model.norm.kernels, self.lm_head, hidden).float()
        cap = self.config.final_logit_softcap
        if cap is not None:
            logits = torch.tanh(logits / cap) * cap
        return logits

    def load_weights(self, tensors: Iterable[tuple[str, torch.Tensor]], source: str) -> None:
        """Fill every parameter from HF-named ``(name, tensor)`` pairs (see
        ``eagle_hal.model.weights.load_named_tensors`` for checks and errors). A tied model
        ignores ``lm_head.weight``; rotary ``inv_freq`` buffers of old checkpoints are
        ignored."""
        tied = self.config.tie_word_embeddings

        def skip(name: str) -> bool:
            return name.endswith("rotary_emb.inv_freq") or (tied and name == "lm_head.weight")

        load_named_tensors(self, self._norms_offset(self._split_fused(tensors, source)), source,
                           skip=skip)

    def _norms_offset(
        self, tensors: Iterable[tuple[str, torch.Tensor]]
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Norm weights plus ``config.norm_weight_offset`` (Hugging Face's Gemma checkpoints
        store ``w`` for a scale of ``1 + w``; GGUF files store ``1 + w`` already), added in
        float32 so that the model's ``x / rms(x) * weight`` norms compute Gemma's."""
        offset = self.config.norm_weight_offset
        for name, tensor in tensors:
            if offset and name.endswith("norm.weight"):
                tensor = tensor.float() + offset
            yield name, tensor

    def _split_fused(
        self, tensors: Iterable[tuple[str, torch.Tensor]], source: str
    ) -> Iterator[tuple[str, torch.Tensor]]:
        """Phi-3's ``self_attn.qkv_proj`` (rows: Q, then K, then V) and ``mlp.gate_up_proj``
        (rows: gate, then up) as the separate tensors of our parameter names; every other
        tensor as it is. A fused tensor of the wrong row count is a ``TensorShapeMismatch``."""
        config = self.config
        q, kv = config.num_heads * config.head_dim, config.num_kv_heads * config.head_dim
        parts = {
            "self_attn.qkv_proj": (("self_attn.q_proj", q), ("self_attn.k_proj", kv),
                                   ("self_attn.v_proj", kv)),
            "mlp.gate_up_proj": (("mlp.gate_proj", config.intermediate_size),
                                 ("mlp.up_proj", config.intermediate_size)),
        }
        for name, tensor in tensors:
            match = _FUSED_NAME.fullmatch(name)
            if match is None:
                yield name, tensor
                continue
            split = parts[match["module"]]
            rows = sum(size for _, size in split)
            if tensor.dim() == 0 or tensor.shape[0] != rows:
                raise TensorShapeMismatch(
                    name, (rows, *tuple(tensor.shape[1:])), tuple(tensor.shape), source)
            start = 0
            for part, size in split:
                yield f"{match['prefix']}.{part}.{match['kind']}", tensor[start:start + size]
                start += size


def check_llama_checkpoint(
    config: ModelConfig, shapes: Mapping[str, tuple[int, ...]], source: str
) -> None:
    """Check, before a ``LlamaForCausalLM`` of ``config`` is allocated, that a checkpoint
    whose headers declare ``shapes`` (Hugging Face names) fills it: the model is built on
    the meta device and loaded with meta tensors of those shapes, which raises exactly
    the errors the real load would (``TensorShapeMismatch``, ``MissingTensorsError``,
    ``UnexpectedTensorsError``) while allocating nothing. Raises ``InvalidConfigError``
    when the config's layer count or head size alone exceed what the checkpoint could hold,
    since even the meta build scales with those."""
    held = sum(math.prod(shape) for shape in shapes.values())
    if config.num_layers > len(shapes) or config.head_dim > held:
        raise InvalidConfigError(
            f"the config of {source} describes {config.num_layers} layers of head size "
            f"{config.head_dim}, more than its {len(shapes)} tensors can hold"
        )
    model = LlamaForCausalLM(config, device="meta")
    model.load_weights(
        ((name, torch.empty(shape, device="meta")) for name, shape in shapes.items()), source
    )
    check_fits(config.num_parameters, held, source)
