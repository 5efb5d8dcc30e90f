"""The model configuration, normalised once from Hugging Face ``config.json`` or GGUF metadata.

One ``ModelConfig`` describes every supported member of the Llama family; the variants are
flags (QKV bias for Qwen2, RMSNorm of each head's queries and keys for Qwen3, tied
embeddings for SmolLM2, rotary scaling for Llama 3.1+, Gemma's embedding scale, sandwich
norms, GELU-tanh MLP and local layers, Gemma 2's soft-capped attention scores and logits).
Phi-3 is a Llama whose checkpoint fuses Q/K/V and gate/up into one tensor each; the loader
splits them. Everything downstream reads these typed fields, never the raw dicts.

A sliding window (Mistral, Phi-3, Gemma 2 and 3's local layers) reaches the attention
backend per layer (``layer_windows``). A backend that does not apply windows
(``Capabilities.sliding_window``) attends over the whole context, which is exact while a
request's context stays within the window: the engine then stops requests at
``unwindowed_context_len``.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from typing import Any

from eagle_hal.model.errors import InvalidConfigError, UnsupportedModelError

__all__ = ["ModelConfig", "RopeScaling", "RopeScalingKind", "SUPPORTED_HF_ARCHITECTURES"]

# HF ``architectures`` entry -> our family member.
SUPPORTED_HF_ARCHITECTURES: Mapping[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
    "Phi3ForCausalLM": "phi3",
    "Gemma2ForCausalLM": "gemma2",
    "Gemma3ForCausalLM": "gemma3",
}
# ``model_type`` spellings of families whose ``architectures`` entry is another name
_MODEL_TYPE_FAMILIES: Mapping[str, str] = {"gemma3_text": "gemma3"}
# Gemma 2's values where its config.json leaves a key out (transformers' Gemma2Config)
_GEMMA2_DEFAULTS: Mapping[str, float] = {
    "query_pre_attn_scalar": 256, "sliding_window": 4096, "attn_logit_softcapping": 50.0,
    "final_logit_softcapping": 30.0,
}
# Hugging Face ``hidden_act`` / ``hidden_activation`` -> the gated MLP's activation
_ACTIVATIONS: Mapping[str, str] = {"silu": "silu", "gelu_pytorch_tanh": "gelu_tanh"}
_SUPPORTED_MODEL_TYPES = frozenset(SUPPORTED_HF_ARCHITECTURES.values()) | frozenset(
    _MODEL_TYPE_FAMILIES)
# gemma2 GGUF metadata (layer pattern, caps, window) is not read yet: refused, not guessed
_SUPPORTED_GGUF_ARCHITECTURES = ("llama", "qwen2", "qwen3", "phi3", "gemma3")
# llama.cpp's fixed Gemma 3 values (its files do not carry them): every sixth layer attends
# globally, local layers rotate with base 10000
_GEMMA3_GGUF_PATTERN = 6
_GEMMA3_GGUF_LOCAL_THETA = 10000.0
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

    architecture: str  # "llama" | "mistral" | "qwen2" | "qwen3" | "phi3" | "gemma2" | "gemma3"
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
    # the window of every layer (Mistral, Phi-3) or of ``sliding_layers`` (Gemma) when those
    # are given; see the module docstring
    sliding_window: int | None = None
    qk_norm: bool = False  # RMSNorm over head_dim of each query and key head (Qwen3, Gemma 3)
    # Gemma 2 and 3 (all neutral elsewhere): the gated MLP's activation ("silu" | "gelu_tanh"),
    # the factor the token embeddings are scaled by (sqrt(hidden)), the attention's score
    # scale (None: head_dim ** -0.5), norms after attention and MLP as well as before,
    # what the checkpoint's norm weights lack (HF Gemma stores w for a scale of 1 + w),
    # the layers of local attention (Gemma 3: with their own rotary base), and Gemma 2's
    # soft-caps of the attention scores and of the final logits (x -> cap * tanh(x / cap)).
    activation: str = "silu"
    embedding_scale: float = 1.0
    attention_scale: float | None = None
    sandwich_norms: bool = False
    norm_weight_offset: float = 0.0
    sliding_layers: tuple[int, ...] = ()
    local_rope_theta: float | None = None
    attn_logit_softcap: float | None = None
    final_logit_softcap: float | None = None
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
        if self.activation not in ("silu", "gelu_tanh"):
            raise ValueError(f"activation must be 'silu' or 'gelu_tanh', got {self.activation!r}")
        if any(not 0 <= i < self.num_layers for i in self.sliding_layers):
            raise ValueError(f"sliding layers {self.sliding_layers} outside [0, "
                             f"{self.num_layers})")
        for name in ("attn_logit_softcap", "final_logit_softcap", "sliding_window"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0, got {value}")
        factors = self.rope_scaling.frequency_factors
        if factors and len(factors) != self.head_dim // 2:
            raise ValueError(
                f"rope frequency factors have {len(factors)} entries, expected head_dim/2 = "
                f"{self.head_dim // 2}"
            )

    @property
    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding window (``None``: full attention): ``sliding_window`` on
        ``sliding_layers`` when those are listed (Gemma), else on every layer; ``()`` when
        no layer has one."""
        window = self.sliding_window
        if window is None or (self.architecture in ("gemma2", "gemma3")
                              and not self.sliding_layers):
            return ()
        if not self.sliding_layers:
            return (window,) * self.num_layers
        return tuple(window if i in self.sliding_layers else None
                     for i in range(self.num_layers))

    @property
    def max_context_len(self) -> int:
        """The longest context the model takes (its windows applied by the backend)."""
        return self.max_position_embeddings

    @property
    def unwindowed_context_len(self) -> int:
        """The longest context attention without sliding windows computes exactly: the
        smallest window, or ``max_context_len`` when no layer has one."""
        windows = [w for w in self.layer_windows if w is not None]
        return min([self.max_position_embeddings, *windows])

    @property
    def num_parameters(self) -> int:
        """How many values the checkpoint of this model holds (a tied ``lm_head`` counted
        once). Loaders compare it with what a file holds before allocating anything."""
        h, q = self.hidden_size, self.num_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        per_layer = 2 * h * q + 2 * h * kv + 3 * h * self.intermediate_size + 2 * h
        if self.attention_bias:
            per_layer += q + 2 * kv
        if self.attention_out_bias:
            per_layer += h
        if self.qk_norm:
            per_layer += 2 * self.head_dim
        if self.sandwich_norms:
            per_layer += 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_layers * per_layer + h

    # -- normalisation at the edge ---------------------------------------------------------

    @classmethod
    def from_hf_config(
        cls,
        raw: Mapping[str, Any],
        *,
        architecture: str | None = None,
        source: str = "the model config",
    ) -> ModelConfig:
        """Normalise a Hugging Face ``config.json`` dict.

        ``architecture`` overrides detection (draft heads declare their own architecture
        names but use the Llama geometry). ``source`` names the file in messages. Raises
        ``UnsupportedModelError`` for an architecture, activation, MLP bias or rotary
        scaling this implementation lacks, and ``InvalidConfigError`` for missing keys,
        values of the wrong type or out of range, and inconsistent geometry.
        """
        if not isinstance(raw, Mapping):
            raise InvalidConfigError(
                f"{source} must hold a JSON object, not {type(raw).__name__}"
            )
        fields = ConfigFields(raw, source)
        family = architecture or _hf_family(raw)
        missing = [key for key in _REQUIRED_HF_KEYS if raw.get(key) is None]
        if missing:
            raise InvalidConfigError(f"{source} lacks required keys: {', '.join(missing)}")
        activation_key = "hidden_activation" if raw.get("hidden_activation") else "hidden_act"
        activation = fields.text(activation_key, "silu")
        if activation not in _ACTIVATIONS:
            raise UnsupportedModelError(
                f"{activation_key} {activation!r} is not supported; supported: "
                f"{', '.join(_ACTIVATIONS)}"
            )
        if fields.flag("mlp_bias", False):
            raise UnsupportedModelError("mlp_bias=true is not supported")
        rotary_fraction = fields.number("partial_rotary_factor", None) or ConfigFields(
            fields.mapping("rope_parameters"), f"{source} rope_parameters"
        ).number("partial_rotary_factor", 1.0)
        if rotary_fraction != 1.0:
            raise UnsupportedModelError(
                f"partial_rotary_factor {rotary_fraction} is not supported; only rotary "
                "embeddings over the whole head (1.0) are"
            )
        num_heads = fields.integer("num_attention_heads")
        hidden_size = fields.integer("hidden_size")
        gemma = _hf_gemma(raw, fields, family) if family in ("gemma2", "gemma3") else {}
        rope_raw = gemma.pop("rope_raw", raw)
        rope_theta, rope_scaling = _hf_rope(rope_raw, ConfigFields(rope_raw, source))
        llama_bias = fields.flag("attention_bias", False)
        sliding_window = gemma.pop("sliding_window", None) or fields.integer(
            "sliding_window", None)
        if family in ("qwen2", "qwen3") and not fields.flag("use_sliding_window", False):
            sliding_window = None
        if family == "llama" or (family in ("gemma2", "gemma3")
                                 and not gemma["sliding_layers"]):
            sliding_window = None
        head_dim = fields.integer("head_dim", None)
        return _built(
            cls,
            source,
            architecture=family,
            vocab_size=fields.integer("vocab_size"),
            hidden_size=hidden_size,
            intermediate_size=fields.integer("intermediate_size"),
            num_layers=fields.integer("num_hidden_layers"),
            num_heads=num_heads,
            num_kv_heads=fields.integer("num_key_value_heads", None) or num_heads,
            head_dim=head_dim or max(hidden_size // num_heads, 1),
            rms_norm_eps=fields.number("rms_norm_eps", 1e-6, minimum=0.0),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=fields.integer(
                "max_position_embeddings", 4096, maximum=_MAX_POSITIONS
            ),
            tie_word_embeddings=gemma.pop(
                "tie_word_embeddings", fields.flag("tie_word_embeddings", False)),
            attention_bias=family == "qwen2" or llama_bias,
            attention_out_bias=family != "qwen2" and llama_bias,
            sliding_window=sliding_window,
            qk_norm=family in ("qwen3", "gemma3"),
            activation=_ACTIVATIONS[activation],
            bos_token_id=fields.integer("bos_token_id", None, minimum=0),
            eos_token_ids=fields.integers("eos_token_id"),
            **gemma,
        )

    @classmethod
    def from_gguf_metadata(cls, reader: Any, *, source: str = "the GGUF file") -> ModelConfig:
        """Normalise the metadata of a ``gguf.GGUFReader`` (keys ``{arch}.block_count``...).

        ``source`` names the file in messages. Raises ``UnsupportedModelError`` for GGUF
        architectures other than llama, qwen2, qwen3, phi3 and gemma3 and ``InvalidConfigError``
        for missing or ill-typed metadata. Tied embeddings are inferred from the absence of an
        ``output.weight`` tensor.
        """
        fields = ConfigFields(_GGUFMetadata(reader.fields, source), source)
        arch = fields.text("general.architecture", None)
        if arch not in _SUPPORTED_GGUF_ARCHITECTURES:
            raise UnsupportedModelError(
                f"GGUF architecture {arch!r} is not supported; supported: "
                f"{', '.join(_SUPPORTED_GGUF_ARCHITECTURES)}"
            )
        tensor_names = {t.name for t in reader.tensors}
        num_heads = fields.integer(f"{arch}.attention.head_count")
        hidden_size = fields.integer(f"{arch}.embedding_length")
        vocab = fields.integer(f"{arch}.vocab_size", None)
        if vocab is None:
            tokens = reader.fields.get("tokenizer.ggml.tokens")
            if tokens is None:
                raise InvalidConfigError(
                    f"{source} has neither {arch}.vocab_size nor tokenizer.ggml.tokens"
                )
            vocab = len(tokens.data)
        eos = fields.integer("tokenizer.ggml.eos_token_id", None, minimum=0)
        gemma: dict[str, Any] = {"qk_norm": True} if arch == "qwen3" else {}
        if arch == "phi3":
            if any(t.name.startswith("rope_factors_") for t in reader.tensors):
                raise UnsupportedModelError(
                    f"{source}: Phi-3 'longrope' scaling (rope_factors_long/short) is not "
                    "supported"
                )
            head_dim = fields.integer(f"{arch}.attention.key_length",
                                      max(hidden_size // num_heads, 1))
            rotary = fields.integer(f"{arch}.rope.dimension_count", head_dim)
            if rotary != head_dim:
                raise UnsupportedModelError(
                    f"{source}: rotary over {rotary} of {head_dim} head dimensions (partial "
                    "rotary) is not supported"
                )
            gemma = {"sliding_window": fields.integer(f"{arch}.attention.sliding_window", None)}
        if arch == "gemma3":
            layers = fields.integer(f"{arch}.block_count")
            pattern = fields.integer(f"{arch}.attention.sliding_window_pattern",
                                     _GEMMA3_GGUF_PATTERN)
            sliding = tuple(i for i in range(layers) if (i + 1) % pattern)
            gemma = dict(
                activation="gelu_tanh",
                embedding_scale=math.sqrt(hidden_size),
                # the 27B model (62 layers) scales by hidden / heads, the others by head_dim,
                # as llama.cpp does
                attention_scale=(hidden_size / num_heads) ** -0.5 if layers == 62 else None,
                sandwich_norms=True,
                qk_norm=True,
                sliding_layers=sliding,
                local_rope_theta=fields.number(f"{arch}.rope.freq_base_swa",
                                               _GEMMA3_GGUF_LOCAL_THETA),
                sliding_window=fields.integer(f"{arch}.attention.sliding_window", None)
                if sliding else None,
            )
        return _built(
            cls,
            source,
            architecture=arch,
            vocab_size=vocab,
            hidden_size=hidden_size,
            intermediate_size=fields.integer(f"{arch}.feed_forward_length"),
            num_layers=fields.integer(f"{arch}.block_count"),
            num_heads=num_heads,
            num_kv_heads=fields.integer(f"{arch}.attention.head_count_kv", num_heads),
            head_dim=fields.integer(
                f"{arch}.attention.key_length", max(hidden_size // num_heads, 1)
            ),
            rms_norm_eps=fields.number(
                f"{arch}.attention.layer_norm_rms_epsilon", 1e-6, minimum=0.0
            ),
            rope_theta=fields.number(f"{arch}.rope.freq_base", 10000.0),
            rope_scaling=_gguf_rope(reader, arch, fields),
            max_position_embeddings=fields.integer(
                f"{arch}.context_length", 4096, maximum=_MAX_POSITIONS
            ),
            tie_word_embeddings="output.weight" not in tensor_names,
            attention_bias="blk.0.attn_q.bias" in tensor_names,
            attention_out_bias="blk.0.attn_output.bias" in tensor_names,
            bos_token_id=fields.integer("tokenizer.ggml.bos_token_id", None, minimum=0),
            eos_token_ids=() if eos is None else (eos,),
            **gemma,
        )


def _built(cls: type[ModelConfig], source: str, **values: Any) -> ModelConfig:
    """``cls(**values)`` with its geometry checks reported against ``source``."""
    try:
        return cls(**values)
    except ValueError as error:
        raise InvalidConfigError(f"{source}: {error}") from error


_REQUIRED = object()
# Dimensions index tensors with 32-bit integers in places; context lengths only size tables.
_MAX_DIMENSION = 2**31 - 1
_MAX_POSITIONS = 2**40


class _GGUFMetadata(Mapping[str, Any]):
    """GGUF reader fields as plain values, decoded only when asked for (a field's text may
    not be valid UTF-8, and decoding every token string would be wasted)."""

    def __init__(self, fields: Mapping[str, Any], source: str) -> None:
        self._fields, self._source = fields, source

    def __getitem__(self, key: str) -> Any:
        field = self._fields[key]
        try:
            return field.contents()
        except (UnicodeDecodeError, IndexError, ValueError, TypeError) as error:
            raise InvalidConfigError(
                f"{self._source}: metadata {key!r} cannot be read: {error}"
            ) from error

    def __iter__(self) -> Any:
        return iter(self._fields)

    def __len__(self) -> int:
        return len(self._fields)


class ConfigFields:
    """Typed reads of one raw config mapping; each failure names the file and the key."""

    def __init__(self, raw: Mapping[str, Any], source: str) -> None:
        self.raw, self.source = raw, source

    def _get(self, key: str, default: Any) -> Any:
        value = self.raw.get(key)
        if value is None:
            if default is _REQUIRED:
                raise InvalidConfigError(f"{self.source} lacks the required key {key!r}")
            return default
        return value

    def _bad(self, key: str, value: Any, wanted: str) -> InvalidConfigError:
        shown = repr(value)
        shown = shown if len(shown) <= 60 else shown[:57] + "..."
        return InvalidConfigError(f"{self.source}: {key} must be {wanted}, got {shown}")

    def integer(
        self, key: str, default: Any = _REQUIRED, *, minimum: int = 1,
        maximum: int = _MAX_DIMENSION,
    ) -> Any:
        value = self._get(key, default)
        if value is default:
            return value
        number = _as_integer(value)
        if number is None:
            raise self._bad(key, value, "an integer")
        if not minimum <= number <= maximum:
            raise self._bad(key, value, f"an integer in [{minimum}, {maximum}]")
        return number

    def integers(self, key: str) -> tuple[int, ...]:
        """A key that holds one non-negative integer, a list of them, or nothing."""
        value = self._get(key, None)
        items = [] if value is None else value if isinstance(value, list) else [value]
        numbers = [_as_integer(item) for item in items]
        if any(n is None or not 0 <= n <= _MAX_DIMENSION for n in numbers):
            raise self._bad(key, value, "a non-negative integer or a list of them")
        return tuple(n for n in numbers if n is not None)

    def number(self, key: str, default: Any = _REQUIRED, *, minimum: float = 0.0,
               strict: bool = True) -> Any:
        """A finite real; above ``minimum`` (``strict``) or at least it."""
        value = self._get(key, default)
        if value is default:
            return value
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self._bad(key, value, "a number")
        number = float(value)
        if not math.isfinite(number) or (number <= minimum if strict else number < minimum):
            bound = f"> {minimum}" if strict else f">= {minimum}"
            raise self._bad(key, value, f"a finite number {bound}")
        return number

    def flag(self, key: str, default: bool) -> bool:
        value = self._get(key, default)
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise self._bad(key, value, "true or false")

    def text(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._get(key, default)
        if value is default or isinstance(value, str):
            return value
        raise self._bad(key, value, "a string")

    def mapping(self, key: str) -> dict[str, Any]:
        value = self._get(key, {})
        if not isinstance(value, Mapping):
            raise self._bad(key, value, "an object")
        return dict(value)


def _as_integer(value: Any) -> int | None:
    """``value`` as an int when it is one (integral floats included, booleans not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    return None


def _hf_family(raw: Mapping[str, Any]) -> str:
    architectures = raw.get("architectures") or []
    if isinstance(architectures, str):
        architectures = [architectures]
    if not isinstance(architectures, list):
        architectures = [architectures]
    for name in architectures:
        if name in SUPPORTED_HF_ARCHITECTURES:
            return SUPPORTED_HF_ARCHITECTURES[name]
    model_type = raw.get("model_type")
    if not architectures and model_type in _SUPPORTED_MODEL_TYPES:
        return _MODEL_TYPE_FAMILIES.get(str(model_type), str(model_type))
    shown = architectures or [model_type]
    raise UnsupportedModelError(
        f"architecture {', '.join(map(str, shown))} is not supported; supported: "
        f"{', '.join(SUPPORTED_HF_ARCHITECTURES)} (SmolLM2 uses LlamaForCausalLM)"
    )


def _hf_gemma(raw: Mapping[str, Any], fields: ConfigFields, family: str) -> dict[str, Any]:
    """Gemma 2's or 3's fields beyond the Llama geometry, and (``rope_raw``) the config the
    (global layers') rotary is read from. The local layers: transformers v5's
    ``layer_types``, or else every ``sliding_window_pattern``-th layer global (Gemma 2:
    every other one). Gemma 3's local rotary base: ``rope_parameters`` per layer type, or
    the older ``rope_local_base_freq`` beside ``rope_theta``; Gemma 2 rotates every layer
    alike. Gemma 2's keys that its config may leave out take transformers' defaults."""
    if family == "gemma2":
        raw = {**_GEMMA2_DEFAULTS, **raw}
        fields = ConfigFields(raw, fields.source)
    layers = fields.integer("num_hidden_layers")
    types = raw.get("layer_types")
    if types is not None:
        if not isinstance(types, list) or len(types) != layers or not all(
            t in ("sliding_attention", "full_attention") for t in types
        ):
            raise InvalidConfigError(
                f"{fields.source}: layer_types must list 'sliding_attention' or "
                f"'full_attention' for each of the {layers} layers"
            )
        sliding = tuple(i for i, t in enumerate(types) if t == "sliding_attention")
    else:
        pattern = fields.integer("sliding_window_pattern", None) or fields.integer(
            "_sliding_window_pattern", 2 if family == "gemma2" else 6)
        sliding = tuple(i for i in range(layers) if (i + 1) % pattern)
    params = fields.mapping("rope_parameters")
    local_theta: float | None
    if family == "gemma2":
        rope_raw: Mapping[str, Any] = raw
        local_theta = None
    elif "full_attention" in params or "sliding_attention" in params:
        full = ConfigFields(params, f"{fields.source} rope_parameters").mapping("full_attention")
        local = ConfigFields(params, f"{fields.source} rope_parameters").mapping(
            "sliding_attention")
        rope_raw = {"rope_parameters": full}
        local_fields = ConfigFields(local, f"{fields.source} rope_parameters.sliding_attention")
        local_theta = local_fields.number("rope_theta", 10000.0)
        if local.get("rope_type", "default") != "default":
            raise UnsupportedModelError(
                f"rope scaling {local.get('rope_type')!r} on sliding layers is not supported"
            )
    else:
        rope_raw = raw
        local_theta = fields.number("rope_local_base_freq", 10000.0)
    caps = {}
    for key, name in (("attn_logit_softcapping", "attn_logit_softcap"),
                      ("final_logit_softcapping", "final_logit_softcap")):
        caps[name] = fields.number(key, None)
        if caps[name] is not None and family == "gemma3":
            raise UnsupportedModelError(f"{key} is not supported for Gemma 3 (it sets none)")
    hidden = fields.integer("hidden_size")
    scalar = fields.number("query_pre_attn_scalar", None)
    extra: dict[str, Any] = {}
    if family == "gemma2":
        extra["sliding_window"] = fields.integer("sliding_window", None)
    return {
        **caps,
        **extra,
        "rope_raw": rope_raw,
        "embedding_scale": math.sqrt(hidden),
        "attention_scale": None if scalar is None else scalar**-0.5,
        "sandwich_norms": True,
        "norm_weight_offset": 1.0,
        "sliding_layers": sliding,
        "local_rope_theta": local_theta,
        "tie_word_embeddings": fields.flag("tie_word_embeddings", True),
    }


def _hf_rope(raw: Mapping[str, Any], fields: ConfigFields) -> tuple[float, RopeScaling]:
    """Rotary base and scaling from either transformers v5 ``rope_parameters`` or the older
    ``rope_theta`` + ``rope_scaling`` pair."""
    params = fields.mapping("rope_parameters")
    scaling = fields.mapping("rope_scaling")
    theta = (ConfigFields(params, f"{fields.source} rope_parameters").number("rope_theta", None)
             or fields.number("rope_theta", 10000.0))
    spec = params if params.get("rope_type", "default") != "default" else scaling
    kind = spec.get("rope_type", spec.get("type", "default"))
    if kind in ("default", None):
        return theta, RopeScaling()
    where = ConfigFields(spec, f"{fields.source} rope scaling")
    try:
        if kind == "linear":
            return theta, RopeScaling(RopeScalingKind.LINEAR, factor=where.number("factor"))
        if kind == "llama3":
            return theta, RopeScaling(
                RopeScalingKind.LLAMA3,
                factor=where.number("factor"),
                low_freq_factor=where.number("low_freq_factor"),
                high_freq_factor=where.number("high_freq_factor"),
                original_max_position_embeddings=where.integer(
                    "original_max_position_embeddings", maximum=_MAX_POSITIONS
                ),
            )
    except ValueError as error:
        if isinstance(error, InvalidConfigError):
            raise
        raise InvalidConfigError(f"{fields.source}: {error}") from error
    raise UnsupportedModelError(
        f"rope scaling type {kind!r} is not supported; supported: default, linear, llama3"
    )


def _gguf_rope(reader: Any, arch: str, fields: ConfigFields) -> RopeScaling:
    for tensor in reader.tensors:
        if tensor.name == "rope_freqs.weight":  # Llama 3.1+ GGUFs store the divisors
            factors = tuple(float(x) for x in tensor.data.reshape(-1))
            if not factors or not all(math.isfinite(x) and x > 0 for x in factors):
                raise InvalidConfigError(
                    f"{fields.source}: rope_freqs.weight must hold positive finite divisors"
                )
            return RopeScaling(RopeScalingKind.FREQUENCY_FACTORS, frequency_factors=factors)
    kind = fields.text(f"{arch}.rope.scaling.type", "none")
    if kind == "none":
        return RopeScaling()
    if kind == "linear":
        return RopeScaling(
            RopeScalingKind.LINEAR, factor=fields.number(f"{arch}.rope.scaling.factor")
        )
    raise UnsupportedModelError(
        f"GGUF rope scaling type {kind!r} is not supported; supported: none, linear, "
        "rope_freqs tensor"
    )
