"""EAGLE head directories, as the EAGLE authors (SafeAILab), SpecForge and SGLang publish them.

A head directory holds ``config.json`` and its weights: safetensors (single or sharded), or
the EAGLE authors' ``pytorch_model.bin``, read only through torch's weights-only loader
(``eagle_hal.model.loading.torch_bin``). Tensor names are the published ones; a ``model.``
prefix on every name but ``lm_head``'s (some exports) is dropped.

The variant is detected from tensor names: ``midlayer.*`` or ``d2t`` means EAGLE-3 (a
``layers.0.hidden_norm.weight`` head is EAGLE-3 saved under decoder-layer names);
``fc.weight`` with ``layers.0.*`` means EAGLE-1. Bias flags come from the tensors present
(``fc.bias``, ``...q_proj.bias``), not from config keys, which publishers spell differently.

EAGLE-3 feature layers: a config ``eagle_config.eagle_aux_hidden_state_layer_ids`` lists the
target layers whose *outputs* the head was trained on; we take the residual streams
entering the next layers (``id + 1``). Without it the published default
``(2, L // 2, L - 3)`` applies.

An ``embed_tokens.weight`` in the checkpoint must have the target's shape; when it differs
from the target's embedding in value, the head keeps its own frozen copy.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import math
import re
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import torch
from torch import nn

from eagle_hal.model.config import ConfigFields, ModelConfig, RopeScalingKind
from eagle_hal.model.eagle import Eagle1DraftModel, Eagle3DraftModel, EagleDraftModel
from eagle_hal.model.errors import (
    InvalidConfigError,
    MissingTensorsError,
    ModelFileNotFound,
    ModelLoadError,
    TensorShapeMismatch,
    UnsupportedModelError,
)
from eagle_hal.model.hub import resolve_draft
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.model.loading.hf import (
    iter_safetensors,
    read_json,
    safetensors_files,
    safetensors_tensors,
)
from eagle_hal.model.loading.torch_bin import read_torch_bin
from eagle_hal.model.weights import check_fits, load_named_tensors

__all__ = [
    "EagleVariant",
    "HeadCheckpoint",
    "HeadTargetMismatch",
    "check_head_matches_target",
    "detect_eagle_variant",
    "load_eagle_head",
    "read_head_checkpoint",
    "save_eagle1",
    "save_eagle3",
]

_EMBEDDING = "embed_tokens.weight"
_TORCH_BIN = "pytorch_model.bin"
_LAYER_NAME = re.compile(r"layers\.(\d+)\.")


class EagleVariant(enum.Enum):
    EAGLE1 = "eagle1"
    EAGLE3 = "eagle3"


def detect_eagle_variant(names: Iterable[str]) -> EagleVariant:
    """Which EAGLE head a checkpoint holds, from its tensor names. Raises
    ``UnsupportedModelError`` when the names fit neither published layout."""
    names = set(names)
    if "d2t" in names or any(n.startswith("midlayer.") for n in names):
        return EagleVariant.EAGLE3
    if "layers.0.hidden_norm.weight" in names:
        return EagleVariant.EAGLE3
    if "fc.weight" in names and any(n.startswith("layers.0.") for n in names):
        return EagleVariant.EAGLE1
    shown = ", ".join(sorted(names)[:6])
    raise UnsupportedModelError(
        f"not an EAGLE head: expected EAGLE-1 names (fc.weight, layers.0.*) or EAGLE-3 names "
        f"(fc.weight, midlayer.*, d2t), found {shown}"
    )


@dataclasses.dataclass(frozen=True)
class HeadCheckpoint:
    """A head directory's config and tensor names and shapes, read without loading any
    tensor data: what ``check_head_matches_target`` needs before a target loads.

    Names are canonical: EAGLE-3 ``layers.0.*`` become ``midlayer.*``, and a ``model.``
    prefix that every tensor but ``lm_head`` carries (some exports) is dropped."""

    directory: Path
    config_path: Path
    raw: dict[str, Any]
    variant: EagleVariant
    shapes: dict[str, tuple[int, ...]]
    numel: int
    safetensors: tuple[Path, ...]  # the weights, or empty for ...
    torch_bin: Path | None  # ... a PyTorch pickle checkpoint (pytorch_model.bin)
    strip_model_prefix: bool = False

    @property
    def fields(self) -> ConfigFields:
        return ConfigFields(self.raw, str(self.config_path))

    def rename(self, name: str) -> str:
        """The canonical name of checkpoint tensor ``name``."""
        return _canonical(name, self.variant, self.strip_model_prefix)

    def tensors(self) -> Iterator[tuple[str, torch.Tensor]]:
        """Every tensor, canonically named, one at a time."""
        if self.torch_bin is not None:
            for name, tensor in read_torch_bin(self.torch_bin).items():
                yield self.rename(name), tensor
            return
        for name, tensor in iter_safetensors(list(self.safetensors)):
            yield self.rename(name), tensor


def read_head_checkpoint(directory: str | Path) -> HeadCheckpoint:
    """The config and tensor shapes of EAGLE head ``directory`` (a local path or a hub id,
    ``eagle_hal.model.hub.resolve_draft``): safetensors headers, or a ``pytorch_model.bin``
    opened memory-mapped through torch's weights-only loader (``torch_bin``). Raises
    ``ModelFileNotFound``, ``CorruptFileError``, ``UnsupportedModelError`` (not an EAGLE
    layout; torch too old for a ``.bin``)."""
    directory = resolve_draft(directory)
    if not directory.is_dir():
        raise ModelFileNotFound(f"EAGLE head directory {directory} does not exist")
    config_path = directory / "config.json"
    raw = read_json(config_path)
    files: list[Path] = []
    torch_bin: Path | None = None
    has_safetensors = (directory / "model.safetensors.index.json").is_file() or any(
        p.is_file() for p in directory.glob("*.safetensors"))
    if has_safetensors or not (directory / _TORCH_BIN).is_file():
        files = safetensors_files(directory)
        held = {name: t.shape for name, t in safetensors_tensors(files).items()}
    else:
        torch_bin = directory / _TORCH_BIN
        held = {name: tuple(t.shape) for name, t in read_torch_bin(torch_bin).items()}
    strip = bool(held) and all(
        name.startswith("model.") for name in held if not name.startswith("lm_head."))
    names = [name[len("model."):] if strip and name.startswith("model.") else name
             for name in held]
    variant = detect_eagle_variant(names)
    shapes = {_canonical(name, variant, strip): shape for name, shape in held.items()}
    return HeadCheckpoint(
        directory=directory, config_path=config_path, raw=raw, variant=variant,
        shapes=shapes, numel=sum(math.prod(shape) for shape in held.values()),
        safetensors=tuple(files), torch_bin=torch_bin, strip_model_prefix=strip,
    )


def _canonical(name: str, variant: EagleVariant, strip: bool) -> str:
    if strip and name.startswith("model."):
        name = name[len("model."):]
    return _eagle3_rename(name) if variant is EagleVariant.EAGLE3 else name


class HeadTargetMismatch(ModelLoadError):
    """An EAGLE head was trained for another target: its geometry (hidden size,
    vocabulary, the target layers EAGLE-3 reads) does not fit the target's config."""


def check_head_matches_target(
    head: HeadCheckpoint, target: ModelConfig, target_source: str = "the target"
) -> None:
    """Raise ``HeadTargetMismatch`` naming both configs when ``head`` cannot draft for a
    target of config ``target``: run before the target's weights load, from the two
    configs and the head's tensor shapes alone."""
    fields = head.fields
    problems: list[str] = []
    hidden = fields.integer("hidden_size", None)
    vocab = fields.integer("vocab_size", None)
    if head.variant is EagleVariant.EAGLE1:
        if hidden is not None and hidden != target.hidden_size:
            problems.append(f"hidden_size {hidden} (the target's is {target.hidden_size})")
        fc = head.shapes.get("fc.weight")
        if fc is not None and len(fc) == 2 and fc[1] != 2 * target.hidden_size:
            problems.append(f"fc.weight of shape {list(fc)} reads 2 x {fc[1] // 2} features "
                            f"(the target's hidden size is {target.hidden_size})")
    else:
        feature = fields.integer("target_hidden_size", None)
        fc = head.shapes.get("fc.weight")
        if feature is None and fc is not None and len(fc) == 2:
            feature = fc[1] // 3
        if feature is not None and feature != target.hidden_size:
            problems.append(f"a target hidden size of {feature} (the target's is "
                            f"{target.hidden_size})")
        t2d = head.shapes.get("t2d")
        if t2d is not None and tuple(t2d) != (target.vocab_size,):
            problems.append(f"t2d of shape {list(t2d)} (the target's vocabulary has "
                            f"{target.vocab_size} tokens)")
        layers = _eagle3_aux_ids(fields)
        if isinstance(layers, list):
            beyond = [i for i in layers
                      if isinstance(i, int) and not 0 <= i < target.num_layers]
            if beyond:
                problems.append(f"feature layers {layers} (the target has "
                                f"{target.num_layers} layers)")
        elif target.num_layers < 3:
            problems.append(f"the default feature layers (2, L/2, L-3), but the target has "
                            f"{target.num_layers} layers")
    if vocab is not None and vocab != target.vocab_size:
        problems.append(f"vocab_size {vocab} (the target's is {target.vocab_size})")
    embed = head.shapes.get(_EMBEDDING)
    if embed is not None and tuple(embed) != (target.vocab_size, target.hidden_size):
        problems.append(f"{_EMBEDDING} of shape {list(embed)} (the target's is "
                        f"{[target.vocab_size, target.hidden_size]})")
    if problems:
        raise HeadTargetMismatch(
            f"EAGLE head {head.config_path} does not fit target {target_source} "
            f"({target.architecture}, hidden_size {target.hidden_size}, vocab_size "
            f"{target.vocab_size}, {target.num_layers} layers): the head has "
            + "; ".join(problems)
        )


def load_eagle_head(
    directory: str | Path,
    target: LlamaForCausalLM,
    dtype: torch.dtype | None = None,
) -> EagleDraftModel:
    """Load an EAGLE-1 or EAGLE-3 head for ``target`` (on the target's device; ``dtype``
    defaults to the target's) from a directory (or hub id) of ``config.json`` plus
    safetensors or ``pytorch_model.bin``. Raises ``ModelFileNotFound``,
    ``CorruptFileError`` (unreadable or malformed files), ``HeadTargetMismatch``,
    ``InvalidConfigError`` (config values of the wrong type or range, or more parameters
    than the weights hold), ``UnsupportedModelError``, ``TensorShapeMismatch``,
    ``MissingTensorsError`` or ``UnexpectedTensorsError``."""
    checkpoint = read_head_checkpoint(directory)
    check_head_matches_target(checkpoint, target.config)
    directory, config_path = checkpoint.directory, checkpoint.config_path
    raw, fields, variant = checkpoint.raw, checkpoint.fields, checkpoint.variant
    shapes = checkpoint.shapes
    prefix = "midlayer" if variant is EagleVariant.EAGLE3 else "layers.0"
    config = dataclasses.replace(
        ModelConfig.from_hf_config(raw, architecture="llama", source=str(config_path)),
        num_layers=_eagle1_layer_count(shapes, fields, directory)
        if variant is EagleVariant.EAGLE1 else 1,
        vocab_size=target.config.vocab_size,
        attention_bias=f"{prefix}.self_attn.q_proj.bias" in shapes,
        attention_out_bias=f"{prefix}.self_attn.o_proj.bias" in shapes,
    )
    source = str(directory)
    draft_vocab = fields.integer("draft_vocab_size", None) or target.config.vocab_size
    target_hidden = fields.integer("target_hidden_size", None)
    check_fits(
        _head_parameters(config, variant, draft_vocab, target_hidden or target.config.hidden_size),
        checkpoint.numel,
        source,
    )
    head: EagleDraftModel
    try:
        if variant is EagleVariant.EAGLE1:
            head = Eagle1DraftModel(config, target, fc_bias="fc.bias" in shapes, dtype=dtype)
        else:
            head = Eagle3DraftModel(
                config,
                target,
                draft_vocab_size=draft_vocab,
                target_hidden_size=target_hidden,
                aux_layers=_eagle3_aux_layers(fields, target),
                norm_before_residual=fields.flag("norm_before_residual", False),
                dtype=dtype,
            )
    except ValueError as error:
        if isinstance(error, InvalidConfigError):
            raise
        raise InvalidConfigError(f"{config_path}: {error}") from error
    embedding: list[torch.Tensor] = []

    def tensors() -> Iterator[tuple[str, torch.Tensor]]:
        for name, tensor in checkpoint.tensors():
            if name == _EMBEDDING:
                embedding.append(tensor)
                continue
            yield name, tensor

    # A head whose draft vocabulary is the whole target vocabulary may omit the id maps.
    full_vocab = isinstance(head, Eagle3DraftModel) and (
        head.draft_vocab_size == head.target_vocab_size
    )
    optional = ("d2t", "t2d") if full_vocab else ()
    load_named_tensors(head, tensors(), source, optional=optional)
    if embedding:
        _adopt_embedding(head, embedding[0], source)
    return head.eval()


def _eagle1_layer_count(
    shapes: dict[str, tuple[int, ...]], fields: ConfigFields, directory: Path
) -> int:
    """How many decoder layers an EAGLE-1 checkpoint holds: one past the highest
    ``layers.<i>.`` index (a gap raises ``MissingTensorsError``). The
    tensors decide; a config.json ``num_hidden_layers`` that says otherwise (some exports
    copy the target's) is reported with a warning."""
    indices = [int(m.group(1)) for m in map(_LAYER_NAME.match, shapes) if m is not None]
    count = max(indices) + 1
    if count > len(shapes):  # every layer needs tensors of its own
        raise InvalidConfigError(
            f"EAGLE-1 head {directory} names layer {count - 1} but holds only "
            f"{len(shapes)} tensors"
        )
    stated = fields.integer("num_hidden_layers", None)
    if stated is not None and stated != count:
        warnings.warn(
            f"EAGLE-1 head {directory}: config.json says num_hidden_layers = {stated}, but "
            f"its tensors hold {count} layer(s) (layers.0 .. layers.{count - 1}); loading "
            f"{count}",
            stacklevel=3,
        )
    absent = set(range(count)) - set(indices)
    if absent:
        # reported before the head is allocated: a gap would otherwise size the head by
        # its highest index, whatever the file holds
        last = f"layers.{count - 1}."
        parts = [name[len(last):] for name in shapes if name.startswith(last)]
        raise MissingTensorsError(
            {f"layers.{i}.{part}" for i in absent for part in parts}, str(directory)
        )
    return count


def _head_parameters(
    config: ModelConfig, variant: EagleVariant, draft_vocab: int, target_hidden: int
) -> int:
    """A lower bound on the values a head of ``config`` loads from its checkpoint (norms,
    biases and the optional vocabulary maps left out)."""
    h, q = config.hidden_size, config.num_heads * config.head_dim
    kv = config.num_kv_heads * config.head_dim
    mlp = 3 * h * config.intermediate_size
    if variant is EagleVariant.EAGLE1:
        return 2 * h * h + config.num_layers * (2 * h * q + 2 * h * kv + mlp)
    return 3 * target_hidden * h + 2 * h * q + 4 * h * kv + q * h + mlp + draft_vocab * h


def _eagle3_rename(name: str) -> str:
    return "midlayer." + name[len("layers.0."):] if name.startswith("layers.0.") else name


def _eagle3_aux_ids(fields: ConfigFields) -> list[Any] | None:
    """The target layers a config's ``eagle_config.eagle_aux_hidden_state_layer_ids``
    names (their outputs), or ``None`` for the published default."""
    ids = fields.mapping("eagle_config").get("eagle_aux_hidden_state_layer_ids")
    return ids if ids else None


def _eagle3_aux_layers(fields: ConfigFields, target: LlamaForCausalLM) -> tuple[int, ...] | None:
    ids = _eagle3_aux_ids(fields)
    if ids is None:
        return None
    layers = target.config.num_layers
    if not isinstance(ids, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers for i in ids
    ):
        raise InvalidConfigError(
            f"{fields.source}: eagle_config.eagle_aux_hidden_state_layer_ids must list "
            f"target layers in [0, {layers}), got {ids!r}"
        )
    return tuple(i + 1 for i in ids)


def _adopt_embedding(head: EagleDraftModel, weight: torch.Tensor, source: str) -> None:
    shared = head.embed_tokens.weight
    if tuple(weight.shape) != tuple(shared.shape):
        raise TensorShapeMismatch(_EMBEDDING, tuple(shared.shape), tuple(weight.shape), source)
    weight = weight.to(device=shared.device, dtype=shared.dtype)
    if not torch.equal(weight, shared.detach()):
        head._target_embedding = (nn.Embedding.from_pretrained(weight, freeze=True),)


def save_eagle1(head: Eagle1DraftModel, directory: str | Path) -> None:
    """Write ``head`` as a published-layout EAGLE-1 directory: ``config.json`` (a Llama
    config with ``num_hidden_layers`` the head's layers, usually 1) and ``model.safetensors``
    (``fc.*``, ``layers.<i>.*``). Creates ``directory``; overwrites those two files."""
    if not isinstance(head, Eagle1DraftModel):
        raise TypeError(f"save_eagle1 writes EAGLE-1 heads, got {type(head).__name__}")
    _write_head(head, directory, _head_config_json(head, head.config))


def save_eagle3(head: Eagle3DraftModel, directory: str | Path) -> None:
    """Write ``head`` as a published-layout EAGLE-3 directory (SpecForge's names):
    ``config.json`` (``LlamaForCausalLMEagle3``, ``draft_vocab_size``, ``target_hidden_size``,
    ``eagle_config.eagle_aux_hidden_state_layer_ids``) and ``model.safetensors``
    (``fc.weight``, ``midlayer.*``, ``norm.weight``, ``lm_head.weight``, ``d2t``, ``t2d``).
    Creates ``directory``; overwrites those two files. Raises ``UnsupportedModelError`` for
    feature layers the published config cannot name (the embeddings, layer 0)."""
    if not isinstance(head, Eagle3DraftModel):
        raise TypeError(f"save_eagle3 writes EAGLE-3 heads, got {type(head).__name__}")
    if min(head.aux_layers) < 1:
        raise UnsupportedModelError(
            f"EAGLE-3 feature layers {head.aux_layers} include the embeddings (0): the "
            "published config lists layer outputs, which cannot name them"
        )
    config = _head_config_json(head, head.config)
    config.update(
        architectures=["LlamaForCausalLMEagle3"],
        draft_vocab_size=head.draft_vocab_size,
        target_hidden_size=head.fc.in_features // 3,
        norm_before_residual=head.norm_before_residual,
        # the published ids are the outputs of the layers before the streams we read
        # (``_eagle3_aux_layers`` adds the 1 back)
        eagle_config={"eagle_aux_hidden_state_layer_ids": [i - 1 for i in head.aux_layers]},
    )
    _write_head(head, directory, config)


def _write_head(head: EagleDraftModel, directory: str | Path, config: dict[str, Any]) -> None:
    from safetensors.torch import save_file

    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    # copies: a head fused for inference holds views of one fused weight, which
    # safetensors refuses to write as separate tensors
    state = {name: tensor.detach().to("cpu", copy=True).contiguous()
             for name, tensor in head.state_dict().items()}
    save_file(state, str(directory / "model.safetensors"), metadata={"format": "pt"})
    (directory / "config.json").write_text(
        json.dumps(config, indent=2) + "\n", encoding="utf-8"
    )


def _head_config_json(head: EagleDraftModel, config: ModelConfig) -> dict[str, Any]:
    scaling = config.rope_scaling
    if scaling.kind is RopeScalingKind.FREQUENCY_FACTORS:
        raise UnsupportedModelError(
            "cannot write explicit rope frequency factors (from a GGUF rope_freqs tensor) "
            "into a Hugging Face config.json"
        )
    rope_scaling: dict[str, Any] | None = None
    if scaling.kind is RopeScalingKind.LINEAR:
        rope_scaling = {"rope_type": "linear", "factor": scaling.factor}
    elif scaling.kind is RopeScalingKind.LLAMA3:
        rope_scaling = {
            "rope_type": "llama3",
            "factor": scaling.factor,
            "low_freq_factor": scaling.low_freq_factor,
            "high_freq_factor": scaling.high_freq_factor,
            "original_max_position_embeddings": scaling.original_max_position_embeddings,
        }
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_act": "silu",
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_heads,
        "num_key_value_heads": config.num_kv_heads,
        "head_dim": config.head_dim,
        "num_hidden_layers": config.num_layers,
        "rms_norm_eps": config.rms_norm_eps,
        "rope_theta": config.rope_theta,
        "rope_scaling": rope_scaling,
        "max_position_embeddings": config.max_position_embeddings,
        "vocab_size": head.target_vocab_size,
        "attention_bias": config.attention_bias,
        "bias": head.fc.bias is not None,
        "tie_word_embeddings": False,
        "torch_dtype": str(head.dtype).removeprefix("torch."),
        "bos_token_id": config.bos_token_id,
        "eos_token_id": list(config.eos_token_ids) or None,
    }
