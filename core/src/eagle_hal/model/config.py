"""The model configuration, normalised once from Hugging Face ``config.json`` or GGUF metadata.

One ``ModelConfig`` describes every supported member of the Llama family; the variants are
flags (QKV bias for Qwen2, tied embeddings for SmolLM2, rotary scaling for Llama 3.1+).
Everything downstream reads these typed fields, never the raw dicts.

Mistral's sliding window is not implemented by the attention backends: attention is
always over the full context. That is exact while a request's context stays within the
window, so ``ModelConfig.max_context_len`` is capped at ``sliding_window`` and the engine
must not run a request past it.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from typing import Any

from eagle_hal.model.errors import ModelLoadError, UnsupportedModelError

__all__ = ["ModelConfig", "RopeScaling", "RopeScalingKind", "SUPPORTED_HF_ARCHITECTURES"]

# HF ``architectures`` entry -> our family member.
SUPPORTED_HF_ARCHITECTURES: Mapping[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}
_SUPPORTED_MODEL_TYPES = frozenset(SUPPORTED_HF_ARCHITECTURES.values())
_SUPPORTED_GGUF_ARCHITECTURES = ("llama", "qwen2")
_REQUIRED_HF_KEYS = (
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
)


class RopeScalingKind(enum.Enum):
    NONE = "none"
    LINEAR = "linear"  # positions divided by ``factor``
    LLAMA3 = "llama3"  # per-frequency interpolation between two wavelengths (Llama 3.1+)
    FREQUENCY_FACTORS = "frequency_factors"  # explicit per-frequency divisors (GGUF rope_freqs)


@dataclasses.dataclass(frozen=True, slots=True)
class RopeScaling:
    """How rotary frequencies are stretched for long contexts."""

    kind: RopeScalingKind = RopeScalingKind.NONE
    factor: float = 1.0
    low_freq_factor: float = 1.0
    high_freq_factor: float = 4.0
    original_max_position_embeddings: int = 8192
    frequency_factors: tuple[float, ...] = ()  # [head_dim // 2], FREQUENCY_FACTORS only

    def __post_init__(self) -> None:
        if self.factor <= 0:
            raise ValueError(f"rope scaling factor must be > 0, got {self.factor}")
        if self.kind is RopeScalingKind.LLAMA3 and self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("llama3 rope scaling needs high_freq_factor > low_freq_factor")
        if (self.kind is RopeScalingKind.FREQUENCY_FACTORS) != bool(self.frequency_factors):
            raise ValueError("frequency_factors are given exactly for kind FREQUENCY_FACTORS")


@dataclasses.dataclass(frozen=True, slots=True)
class ModelConfig:
    """The geometry and numerics of one Llama-family model."""

    architecture: str  # "llama" | "mistral" | "qwen2"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: RopeScaling = RopeScaling()
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False  # bias on q/k/v projections (Qwen2; Llama's attention_bias)
    attention_out_bias: bool = False  # bias on o_proj (Llama's attention_bias only)
    sliding_window: int | None = None  # Mistral; see the module docstring
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                     "num_heads", "num_kv_heads", "head_dim", "max_position_embeddings"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads})"
            )
        if self.head_dim % 2:
            raise ValueError(f"rotary embeddings need an even head_dim, got {self.head_dim}")
        factors = self.rope_scaling.frequency_factors
        if factors and len(factors) != self.head_dim // 2:
            raise ValueError(
                f"rope frequency factors have {len(factors)} entries, expected head_dim/2 = "
                f"{self.head_dim // 2}"
            )

    @property
    def max_context_len(self) -> int:
        """The longest context this implementation computes exactly."""
        if self.sliding_window is None:
            return self.max_position_embeddings
        return min(self.max_position_embeddings, self.sliding_window)

    # -- normalisation at the edge ---------------------------------------------------------

    @classmethod
    def from_hf_config(
        cls, raw: Mapping[str, Any], *, architecture: str | None = None
    ) -> ModelConfig:
        """Normalise a Hugging Face ``config.json`` dict.

        ``architecture`` overrides detection (draft heads declare their own architecture
        names but use the Llama geometry). Raises ``UnsupportedModelError`` for an
        architecture, activation, MLP bias or rotary scaling this implementation lacks.
        """
        family = architecture or _hf_family(raw)
        missing = [key for key in _REQUIRED_HF_KEYS if raw.get(key) is None]
        if missing:
            raise ModelLoadError(f"the model config lacks required keys: {', '.join(missing)}")
        if raw.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(
                f"hidden_act {raw['hidden_act']!r} is not supported; only 'silu' (SwiGLU) is"
            )
        if raw.get("mlp_bias", False):
            raise UnsupportedModelError("mlp_bias=true is not supported")
        num_heads = int(raw["num_attention_heads"])
        hidden_size = int(raw["hidden_size"])
        rope_theta, rope_scaling = _hf_rope(raw)
        llama_bias = bool(raw.get("attention_bias", False))
        sliding_window = raw.get("sliding_window")
        if family == "qwen2" and not raw.get("use_sliding_window", False):
            sliding_window = None
        if family == "llama":
            sliding_window = None
        eos = raw.get("eos_token_id")
        eos_ids = tuple(int(e) for e in eos) if isinstance(eos, list) else (
            () if eos is None else (int(eos),)
        )
        return cls(
            architecture=family,
            vocab_size=int(raw["vocab_size"]),
            hidden_size=hidden_size,
            intermediate_size=int(raw["intermediate_size"]),
            num_layers=int(raw["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=int(raw.get("num_key_value_heads") or num_heads),
            head_dim=int(raw.get("head_dim") or hidden_size // num_heads),
            rms_norm_eps=float(raw.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=int(raw.get("max_position_embeddings", 4096)),
            tie_word_embeddings=bool(raw.get("tie_word_embeddings", False)),
            attention_bias=family == "qwen2" or llama_bias,
            attention_out_bias=family != "qwen2" and llama_bias,
            sliding_window=None if sliding_window is None else int(sliding_window),
            bos_token_id=None if raw.get("bos_token_id") is None else int(raw["bos_token_id"]),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_gguf_metadata(cls, reader: Any) -> ModelConfig:
        """Normalise the metadata of a ``gguf.GGUFReader`` (keys ``{arch}.block_count``...).

        Raises ``UnsupportedModelError`` for GGUF architectures other than llama and qwen2.
        Tied embeddings are inferred from the absence of an ``output.weight`` tensor.
        """
        fields = reader.fields

        def value(key: str, default: Any = None) -> Any:
            field = fields.get(key)
            return default if field is None else field.contents()

        arch = value("general.architecture")
        if arch not in _SUPPORTED_GGUF_ARCHITECTURES:
            raise UnsupportedModelError(
                f"GGUF architecture {arch!r} is not supported; supported: "
                f"{', '.join(_SUPPORTED_GGUF_ARCHITECTURES)}"
            )
        tensor_names = {t.name for t in reader.tensors}
        num_heads = int(value(f"{arch}.attention.head_count"))
        hidden_size = int(value(f"{arch}.embedding_length"))
        vocab = value(f"{arch}.vocab_size")
        if vocab is None:
            vocab = len(fields["tokenizer.ggml.tokens"].data)
        eos = value("tokenizer.ggml.eos_token_id")
        bos = value("tokenizer.ggml.bos_token_id")
        return cls(
            architecture=arch,
            vocab_size=int(vocab),
            hidden_size=hidden_size,
            intermediate_size=int(value(f"{arch}.feed_forward_length")),
            num_layers=int(value(f"{arch}.block_count")),
            num_heads=num_heads,
            num_kv_heads=int(value(f"{arch}.attention.head_count_kv", num_heads)),
            head_dim=int(value(f"{arch}.attention.key_length", hidden_size // num_heads)),
            rms_norm_eps=float(value(f"{arch}.attention.layer_norm_rms_epsilon", 1e-6)),
            rope_theta=float(value(f"{arch}.rope.freq_base", 10000.0)),
            rope_scaling=_gguf_rope(reader, arch, value),
            max_position_embeddings=int(value(f"{arch}.context_length", 4096)),
            tie_word_embeddings="output.weight" not in tensor_names,
            attention_bias="blk.0.attn_q.bias" in tensor_names,
            attention_out_bias="blk.0.attn_output.bias" in tensor_names,
            bos_token_id=None if bos is None else int(bos),
            eos_token_ids=() if eos is None else (int(eos),),
        )


def _hf_family(raw: Mapping[str, Any]) -> str:
    architectures = raw.get("architectures") or []
    for name in architectures:
        if name in SUPPORTED_HF_ARCHITECTURES:
            return SUPPORTED_HF_ARCHITECTURES[name]
    model_type = raw.get("model_type")
    if not architectures and model_type in _SUPPORTED_MODEL_TYPES:
        return str(model_type)
    shown = architectures or [model_type]
    raise UnsupportedModelError(
        f"architecture {', '.join(map(str, shown))} is not supported; supported: "
        f"{', '.join(SUPPORTED_HF_ARCHITECTURES)} (SmolLM2 uses LlamaForCausalLM)"
    )


def _hf_rope(raw: Mapping[str, Any]) -> tuple[float, RopeScaling]:
    """Rotary base and scaling from either transformers v5 ``rope_parameters`` or the older
    ``rope_theta`` + ``rope_scaling`` pair."""
    params = dict(raw.get("rope_parameters") or {})
    scaling = dict(raw.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", raw.get("rope_theta", 10000.0)))
    spec = params if params.get("rope_type", "default") != "default" else scaling
    kind = spec.get("rope_type", spec.get("type", "default"))
    if kind in ("default", None):
        return theta, RopeScaling()
    if kind == "linear":
        return theta, RopeScaling(RopeScalingKind.LINEAR, factor=float(spec["factor"]))
    if kind == "llama3":
        return theta, RopeScaling(
            RopeScalingKind.LLAMA3,
            factor=float(spec["factor"]),
            low_freq_factor=float(spec["low_freq_factor"]),
            high_freq_factor=float(spec["high_freq_factor"]),
            original_max_position_embeddings=int(spec["original_max_position_embeddings"]),
        )
    raise UnsupportedModelError(
        f"rope scaling type {kind!r} is not supported; supported: default, linear, llama3"
    )


def _gguf_rope(reader: Any, arch: str, value: Any) -> RopeScaling:
    for tensor in reader.tensors:
        if tensor.name == "rope_freqs.weight":  # Llama 3.1+ GGUFs store the divisors
            return RopeScaling(
                RopeScalingKind.FREQUENCY_FACTORS,
                frequency_factors=tuple(float(x) for x in tensor.data.reshape(-1)),
            )
    kind = value(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return RopeScaling()
    if kind == "linear":
        factor = float(value(f"{arch}.rope.scaling.factor"))
        return RopeScaling(RopeScalingKind.LINEAR, factor=factor)
    raise UnsupportedModelError(
        f"GGUF rope scaling type {kind!r} is not supported; supported: none, linear, "
        "rope_freqs tensor"
    )
