"""Published model shapes, built with random weights on a device: real-size cost, no download.

Decoding a 8B-70B target is bound by memory bandwidth, and how long a forward takes depends
on the shapes it runs, not on the weights' values. So the cost of the engine at real size
can be measured on a model of the published geometry with random weights, built directly
on the device in its dtype (no checkpoint, no host copy, no float32 intermediate: an 8B
model is 16 GB in bf16), together with an EAGLE-3 head of the published head geometry:
one decoder layer of the target's width, ``fc`` over three of the target's hidden states,
its own ``lm_head`` over a 32,000-token draft vocabulary.

``SHAPES`` holds each target's ``config.json`` as published (the fields the engine reads),
normalised by the same ``ModelConfig.from_hf_config`` as a downloaded checkpoint's. What a
random model emits is meaningless (its accept lengths too: ``speculative.oracle_accept``
fixes them for benchmarks), and it has no tokenizer: prompts are token ids.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.eagle import Eagle3DraftModel
from eagle_hal.model.llama import LlamaForCausalLM

__all__ = ["EAGLE3_DRAFT_VOCAB", "SHAPES", "build_random_models", "random_eagle3",
           "random_target", "shape_config", "unknown_shape_message"]

EAGLE3_DRAFT_VOCAB = 32000  # the published EAGLE-3 heads' draft vocabulary

_LLAMA3_ROPE = {"rope_type": "llama3", "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}

# name -> the published config.json's fields (the ones ModelConfig reads)
SHAPES: Mapping[str, Mapping[str, Any]] = {
    "llama-3.1-8b": {  # meta-llama/Llama-3.1-8B-Instruct
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 128256, "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 8.0},
        "max_position_embeddings": 131072, "tie_word_embeddings": False,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    },
    "llama-3.2-1b": {  # meta-llama/Llama-3.2-1B-Instruct
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 128256, "hidden_size": 2048, "intermediate_size": 8192,
        "num_hidden_layers": 16, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 64, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "rope_scaling": {**_LLAMA3_ROPE, "factor": 32.0},
        "max_position_embeddings": 131072, "tie_word_embeddings": True,
        "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
        "bos_token_id": 128000, "eos_token_id": [128001, 128008, 128009],
    },
    "qwen3-8b": {  # Qwen/Qwen3-8B
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
        "vocab_size": 151936, "hidden_size": 4096, "intermediate_size": 12288,
        "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
        "head_dim": 128, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
        "max_position_embeddings": 40960, "tie_word_embeddings": False,
        "hidden_act": "silu", "attention_bias": False,
        "bos_token_id": 151643, "eos_token_id": 151645,
    },
    # no published model: a shape small enough for a CPU run of the whole path (tests);
    # six layers, as an EAGLE-3 head reads three of them (2, L // 2, L - 3)
    "tiny": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": 512, "hidden_size": 64, "intermediate_size": 128,
        "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
        "max_position_embeddings": 4096, "tie_word_embeddings": False, "hidden_act": "silu",
    },
}
# the draft vocabulary of a shape's head where the published one does not fit its target
_DRAFT_VOCAB = {"tiny": 256}
# a draft head's output scale: logits of standard deviation ~16 make its top-1 token far
# more probable than the rest, as a trained head's usually is, so that a tree's best-first
# layout keeps its deepest chain (a flat random head's trees would stay shallow)
_HEAD_LOGIT_SCALE = 16.0


def unknown_shape_message(name: str) -> str:
    return f"unknown random target {name!r}; known: {', '.join(SHAPES)}"


def shape_config(name_or_config: str | Mapping[str, Any]) -> ModelConfig:
    """The ``ModelConfig`` of a named shape (``SHAPES``) or of a ``config.json`` dict,
    without end-of-sequence tokens: random weights emit them by chance, and a request
    stopping early would shorten the run being measured. Raises ``KeyError`` naming the
    known shapes for an unknown name."""
    if isinstance(name_or_config, str):
        if name_or_config not in SHAPES:
            raise KeyError(unknown_shape_message(name_or_config))
        raw, source = SHAPES[name_or_config], f"the {name_or_config} shape"
    else:
        raw, source = name_or_config, "the given config"
    config = ModelConfig.from_hf_config(raw, source=source)
    return dataclasses.replace(config, eos_token_ids=())


@contextlib.contextmanager
def _default_dtype(dtype: torch.dtype) -> Iterator[None]:
    # the models' constructors build on the meta device, then allocate in the default
    # dtype and cast: built in ``dtype`` directly, a bf16 model never exists in float32
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def _fill(module: torch.nn.Module, seed: int, device: torch.device,
          logit_scale: dict[str, float] | None = None) -> None:
    """Random weights in place, on the device, in the parameters' own dtype: each matrix
    of standard deviation ``in_features ** -0.5`` (times ``logit_scale[name]``), so that
    activations keep their scale through the layers; norm weights 1, biases 0."""
    generator = torch.Generator(device=device).manual_seed(seed)
    scales = logit_scale or {}
    with torch.no_grad():
        for name, param in module.named_parameters():  # a tied weight once
            if param.dim() == 1:
                param.fill_(1.0 if "norm" in name else 0.0)
            else:
                std = param.shape[-1] ** -0.5 * scales.get(name, 1.0)
                param.normal_(0.0, std, generator=generator)


def random_target(config: ModelConfig, device: torch.device | str,
                  dtype: torch.dtype = torch.bfloat16, seed: int = 0) -> LlamaForCausalLM:
    """A target of ``config``'s shape with random weights, built on ``device`` in ``dtype``."""
    device = torch.device(device)
    with _default_dtype(dtype):
        target = LlamaForCausalLM(config, dtype=dtype, device=device)
    _fill(target, seed, device)
    return target


def random_eagle3(target: LlamaForCausalLM, draft_vocab_size: int = EAGLE3_DRAFT_VOCAB,
                  seed: int = 1) -> Eagle3DraftModel:
    """An EAGLE-3 head in the published geometry for ``target`` (one decoder layer of the
    target's shape, ``fc`` over the hidden states of its default three layers, its own norm
    and ``lm_head`` over ``draft_vocab_size`` tokens), random weights on the target's
    device in its dtype. The draft vocabulary is the target's first ``draft_vocab_size``
    ids (``d2t`` zero, ``t2d`` marks them): which ids it holds costs nothing."""
    config = dataclasses.replace(target.config, num_layers=1)
    size = min(draft_vocab_size, target.config.vocab_size)
    with _default_dtype(target.dtype):
        head = Eagle3DraftModel(config, target, draft_vocab_size=size, dtype=target.dtype)
    _fill(head, seed, target.device, {"lm_head.weight": _HEAD_LOGIT_SCALE})
    head.t2d.zero_()
    head.t2d[:size] = True
    return head


def build_random_models(name: str, device: torch.device | str,
                        dtype: torch.dtype = torch.bfloat16, seed: int = 0
                        ) -> tuple[LlamaForCausalLM, Eagle3DraftModel]:
    """The target of the named shape and its EAGLE-3 head, random, on ``device``."""
    target = random_target(shape_config(name), device, dtype, seed)
    return target, random_eagle3(target, _DRAFT_VOCAB.get(name, EAGLE3_DRAFT_VOCAB), seed + 1)
