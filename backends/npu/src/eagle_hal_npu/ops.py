"""The two torch_npu operators the NPU attention calls, behind one small object.

``NpuOps`` holds the fused attention and the KV write as plain callables, so the attention
backend can run against torch_npu on an Ascend device or against an emulation of the same
documented semantics on any device (the tests do the latter). ``NpuOps.from_torch_npu``
binds the real operators.

torch_npu releases disagree on one keyword: recent API references call the softmax scale
``scale``, older ones ``scale_value``. ``fused_attention`` passes ``scale`` and, if the
operator rejects that keyword with a ``TypeError``, retries once with ``scale_value`` and
remembers which one the installed release takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from types import ModuleType
from typing import Any

import torch

__all__ = ["NpuOps"]

_SCALE_KEYWORDS = ("scale", "scale_value")


@dataclasses.dataclass(slots=True)
class NpuOps:
    """``fused_infer_attention_score(query, key, value, **keywords) -> (out, softmax_lse)``
    and ``reshape_and_cache(*, key, value, key_cache, value_cache, slot_indices)``."""

    fused_infer_attention_score: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    reshape_and_cache: Callable[..., Any]
    scale_keyword: str = "scale"

    @classmethod
    def from_torch_npu(cls, torch_npu: ModuleType) -> NpuOps:
        """The real operators of an imported ``torch_npu``; raises ``AttributeError`` naming
        the missing one when the installed release lacks it."""
        missing = [
            name
            for name in ("npu_fused_infer_attention_score", "_npu_reshape_and_cache")
            if not hasattr(torch_npu, name)
        ]
        if missing:
            version = getattr(torch_npu, "__version__", "?")
            raise AttributeError(
                f"torch_npu {version} has no {', '.join(missing)}; eagle-hal's NPU attention "
                f"needs a torch_npu release that provides them"
            )
        return cls(torch_npu.npu_fused_infer_attention_score, torch_npu._npu_reshape_and_cache)

    def fused_attention(
        self, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *, scale: float,
        **keywords: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Call the fused attention, passing ``scale`` under the keyword the release takes."""
        try:
            return self.fused_infer_attention_score(
                query, key, value, **{self.scale_keyword: scale}, **keywords
            )
        except TypeError as exc:
            other = next(k for k in _SCALE_KEYWORDS if k != self.scale_keyword)
            if self.scale_keyword not in str(exc):
                raise
            result = self.fused_infer_attention_score(query, key, value, **{other: scale},
                                                      **keywords)
            self.scale_keyword = other
            return result

    def write_kv(
        self,
        key: torch.Tensor,
        value: torch.Tensor,
        key_blocks: torch.Tensor,
        value_blocks: torch.Tensor,
        slots: torch.Tensor,
    ) -> None:
        """Store ``key``/``value`` ``[T, H_kv, D]`` at int32 ``slots`` ``[T]`` of the
        ``[num_blocks, block_size, H_kv, D]`` caches."""
        self.reshape_and_cache(
            key=key, value=value, key_cache=key_blocks, value_cache=value_blocks,
            slot_indices=slots,
        )
