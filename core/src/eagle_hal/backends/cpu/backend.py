"""The CPU reference backend: every HAL piece in plain torch, eager, on the host."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from eagle_hal.backend import Backend, Capabilities
from eagle_hal.backends.cpu.plugin import CAPABILITIES

if TYPE_CHECKING:  # pragma: no cover - typing only
    import torch

    from eagle_hal.hal.attention import AttentionBackend, AttentionConfig
    from eagle_hal.hal.model_kernels import ModelKernels

__all__ = ["CpuBackend"]


class CpuBackend(Backend):
    """The reference backend. No graph capture; attention and the model kernels are the
    pure-torch reference, the lm_head products a faster layout of the same GEMM."""

    @property
    def capabilities(self) -> Capabilities:
        return CAPABILITIES

    @property
    def torch_device(self) -> torch.device:
        import torch

        return torch.device("cpu")

    def create_attention_backend(self, config: AttentionConfig) -> AttentionBackend:
        """A ``TorchAttentionBackend`` over ``config.kv_store`` (any tree-mask mode)."""
        from eagle_hal.ops.attention_reference import TorchAttentionBackend

        return TorchAttentionBackend(config)

    @property
    def prefers_draft_vocabulary(self) -> bool:
        """True: on the CPU the draft's lm_head over the whole vocabulary costs as much as
        the rest of a draft step (``eagle-hal bench --device cpu --draft-vocab full --modes
        plain,chain:S5,chain:S5V8192``, split timing: a chain of S = 5 drafts for 52 ms an
        iteration over the whole vocabulary, 16 ms over its 8,192 most frequent tokens)."""
        return True

    def default_spec(self, kind: str = "chain") -> Any:
        """Shapes whose verify blocks keep the transposed GEMMs on their fast path
        (``backends/cpu/kernels.py``: 30 layers at 1 row 16.6 ms, at 4 rows 20.6 ms, at
        6 rows 35.6 ms): a chain of S = 3 (4 rows), a tree of S = 3, K = 2, N = 4, and the
        adaptive mode over chains of S = 0-3. On 10 MT-bench first turns x 128 tokens
        (``eagle-hal bench --device cpu --dataset benchmarks/data/mt_bench_question.jsonl
        --num-prompts 10 --max-new-tokens 128 --modes plain,chain,tree,adaptive,chain:S5,
        adaptive:K4N16``) the chain runs 1.24x plain decoding and the tree 1.27x, where a
        chain of S = 5 runs 0.79x and the library's adaptive default (K = 4, N = 16 trees)
        0.93-1.01x against the adaptive chains' 1.26x."""
        from eagle_hal.backends.defaults import check_spec_kind
        from eagle_hal.speculative.config import SpecConfig

        check_spec_kind(kind)
        if kind == "tree":
            return SpecConfig(num_steps=3, topk=2, num_draft_tokens=4)
        if kind == "adaptive":
            return SpecConfig(num_steps=3, adaptive=True, adaptive_steps=(0, 1, 2, 3))
        return SpecConfig(num_steps=3)

    def model_kernels(self) -> ModelKernels:
        """The reference kernels with the transposed lm_head product (see
        ``eagle_hal.backends.cpu.kernels``)."""
        from eagle_hal.backends.cpu.kernels import cpu_model_kernels

        return cpu_model_kernels()
