"""Copying named checkpoint tensors into a module, with the checks a loader owes its user.

Checkpoint readers (safetensors, GGUF) yield ``(name, tensor)`` pairs one at a time, so a
model is filled without holding a second copy of every weight. Each tensor is checked
against the parameter or buffer of the same name: an unknown name, a wrong shape or a
missing tensor raises the specific ``ModelLoadError`` naming it.

Before a model is allocated, ``check_fits`` compares the values a config implies with the
values the files hold (``model.llama.check_llama_checkpoint`` also runs the name and shape
checks on the headers' shapes): a config (or a lying header) cannot make a loader allocate
more parameters than the files could ever fill.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import nn

from eagle_hal.model.errors import (
    InvalidConfigError,
    MissingTensorsError,
    TensorShapeMismatch,
    UnexpectedTensorsError,
)

__all__ = ["check_fits", "load_named_tensors"]


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
