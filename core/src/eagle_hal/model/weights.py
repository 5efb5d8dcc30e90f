"""Copying named checkpoint tensors into a module, with the checks a loader owes its user.

Checkpoint readers (safetensors, GGUF) yield ``(name, tensor)`` pairs one at a time, so a
model is filled without holding a second copy of every weight. Each tensor is checked
against the parameter or buffer of the same name: an unknown name, a wrong shape or a
missing tensor raises the specific ``ModelLoadError`` naming it.

Before a model is allocated, ``check_llama_checkpoint`` runs those checks against the
shapes the checkpoint's validated headers declare, and ``check_fits`` compares the values
a config implies with the values the files hold: a config (or a lying header) cannot make a
loader allocate more parameters than the files could ever fill.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import nn

from eagle_hal.model.errors import (
    InvalidConfigError,
    MissingTensorsError,
    TensorShapeMismatch,
    UnexpectedTensorsError,
)

if TYPE_CHECKING:
    from eagle_hal.model.config import ModelConfig

__all__ = ["check_fits", "check_llama_checkpoint", "load_named_tensors"]


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
    from eagle_hal.model.llama import LlamaForCausalLM

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


def check_fits(needed: int, held: int, source: str) -> None:
    """Raise ``InvalidConfigError`` when a model of ``needed`` values would be built from
    checkpoint files holding only ``held``: every required parameter is copied from a
    tensor of the same shape, so such a model cannot load, and allocating it first could
    exhaust memory."""
    if needed > held:
        raise InvalidConfigError(
            f"the config of {source} describes {needed:,} parameter values, but its weights "
            f"hold only {held:,}; the config does not match the checkpoint"
        )


def load_named_tensors(
    module: nn.Module,
    tensors: Iterable[tuple[str, torch.Tensor]],
    source: str,
    *,
    skip: Callable[[str], bool] = lambda name: False,
    optional: Iterable[str] = (),
) -> set[str]:
    """Copy ``tensors`` into ``module``'s parameters and persistent buffers by name.

    Values are cast to each target's dtype and device. ``skip(name)`` drops a checkpoint
    tensor silently (e.g. a tied ``lm_head.weight``); names in ``optional`` may be absent.
    Returns the names loaded. Raises ``TensorShapeMismatch`` at the first wrong shape,
    ``UnexpectedTensorsError`` for names the module lacks, ``MissingTensorsError`` for
    required names never seen. ``source`` names the checkpoint in messages.
    """
    targets = dict(module.state_dict(keep_vars=True))
    loaded: set[str] = set()
    unexpected: set[str] = set()
    with torch.no_grad():
        for name, tensor in tensors:
            if skip(name):
                continue
            target = targets.get(name)
            if target is None:
                unexpected.add(name)
                continue
            if tuple(target.shape) != tuple(tensor.shape):
                raise TensorShapeMismatch(name, tuple(target.shape), tuple(tensor.shape), source)
            target.copy_(tensor)
            loaded.add(name)
    if unexpected:
        raise UnexpectedTensorsError(unexpected, source)
    missing = set(targets) - loaded - set(optional)
    missing = {name for name in missing if not skip(name)}
    if missing:
        raise MissingTensorsError(missing, source)
    return loaded
