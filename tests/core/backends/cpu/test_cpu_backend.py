"""Tests for the CPU reference backend (core's eagle_hal.backends.cpu), selected for real."""

from __future__ import annotations

import pytest
import torch
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.registry import Registry


@pytest.fixture
def cpu_backend():
    return Registry(allow="cpu", environ={}).select("cpu")


def test_selected_through_its_entry_point(cpu_backend):
    """'cpu' selects the backend registered by the eagle-hal distribution itself."""
    (info,) = [i for i in Registry(allow="cpu", environ={}).backends() if i.name == "cpu"]
    assert (info.name, info.distribution, info.available) == ("cpu", "eagle-hal", True)
    assert type(cpu_backend).__name__ == "CpuBackend"
    assert cpu_backend.torch_device == torch.device("cpu")


def test_capabilities(cpu_backend):
    """Eager, float32/bfloat16, every tree-mask mode, any page size, no triton, gloo."""
    caps = cpu_backend.capabilities
    assert not caps.graph_capture and not caps.triton
    assert set(caps.dtypes) == {"float32", "bfloat16"}
    assert set(caps.tree_mask_modes) == set(TreeMaskMode.ALL)
    assert all(caps.supports_page_size(size) for size in (1, 7, 16, 64))
    assert caps.distributed_backend == "gloo" and caps.visible_devices_env is None
    assert cpu_backend.graph_capture() is None


def test_attention_backend_is_the_reference(cpu_backend):
    """create_attention_backend hands out the pure-torch reference attention."""
    attention_reference = pytest.importorskip("eagle_hal.ops.attention_reference")
    from eagle_hal.hal.attention import AttentionConfig

    config = AttentionConfig(
        num_heads=2,
        num_kv_heads=1,
        head_dim=4,
        num_layers=1,
        scaling=0.5,
        kv_store=None,
        req_to_token=torch.zeros(1, 4, dtype=torch.int64),
    )
    attention = cpu_backend.create_attention_backend(config)
    assert isinstance(attention, attention_reference.TorchAttentionBackend)
    assert attention.config is config


def test_model_kernels_are_the_reference_but_the_logits(cpu_backend):
    """The CPU keeps the pure-torch model kernels (Triton does not run on it) but for its
    GEMMs (the fused projections of small forwards, the lm_head product);
    ``cpu_model_kernels(gemm="torch")`` keeps F.linear there, a typo is refused."""
    import dataclasses

    from eagle_hal.backends.cpu.kernels import (
        CPU_FUSED_LINEAR,
        cpu_model_kernels,
        transposed_product,
    )
    from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

    kernels = cpu_backend.model_kernels()
    assert kernels.logits is transposed_product and kernels.fused_linear is CPU_FUSED_LINEAR
    assert dataclasses.replace(kernels, name="reference", logits=None,
                               fused_linear=None) == REFERENCE_MODEL_KERNELS
    assert cpu_model_kernels(gemm="torch") is REFERENCE_MODEL_KERNELS
    with pytest.raises(ValueError, match="trasnposed"):
        cpu_model_kernels(gemm="trasnposed")


@pytest.mark.parametrize("rows", [1, 2, 7, 16, 40])
@pytest.mark.parametrize("vocab", [97, 4099])
def test_the_transposed_product_is_the_product_in_float64(rows, vocab):
    """x @ W.T against a float64 product: every row count (a single row goes in twice),
    contiguous, float32; bfloat16 takes F.linear and its rounding."""
    from eagle_hal.backends.cpu.kernels import transposed_product

    gen = torch.Generator().manual_seed(rows * vocab)
    weight = torch.randn(vocab, 64, generator=gen)
    x = torch.randn(rows, 64, generator=gen)
    got = transposed_product(x, weight)
    assert got.shape == (rows, vocab) and got.is_contiguous() and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), x.double() @ weight.double().T, atol=1e-4, rtol=0)
    half = transposed_product(x.bfloat16(), weight.bfloat16())
    assert half.dtype == torch.bfloat16
    assert torch.equal(half, torch.nn.functional.linear(x.bfloat16(), weight.bfloat16()))


def test_default_spec_is_a_chain_of_three(cpu_backend):
    """The CPU speculates with a chain of S = 3 when the user names no spec (its 4-row
    verify keeps the transposed GEMMs fast), trees of S = 3, K = 2, N = 4 and the adaptive
    mode over chains of S = 0-3; command-line settings apply over the default of their
    kind; an unknown kind is refused."""
    import argparse

    from eagle_hal.backend import Backend
    from eagle_hal.backends.defaults import library_default_spec
    from eagle_hal.commands.generate import _spec
    from eagle_hal.speculative.config import SpecConfig

    spec = cpu_backend.default_spec()
    assert (spec.num_steps, spec.topk, spec.draft_tokens, spec.adaptive) == (3, 1, 4, False)
    tree = cpu_backend.default_spec("tree")
    assert (tree.num_steps, tree.topk, tree.draft_tokens, tree.adaptive) == (3, 2, 4, False)
    adaptive = cpu_backend.default_spec("adaptive")
    assert (adaptive.topk, adaptive.adaptive, adaptive.adaptive_steps) == (1, True, (0, 1, 2, 3))
    assert Backend.default_spec(cpu_backend) == SpecConfig()  # the base class's: S = 5
    assert Backend.default_spec(cpu_backend, "tree") == SpecConfig(5, 4, 16)
    # the library's adaptive mode narrows its trees past 256 verify tokens a batch
    assert library_default_spec("adaptive") == SpecConfig(5, 4, 16, adaptive=True,
                                                          adaptive_verify_budget=256)
    with pytest.raises(ValueError, match="unknown spec kind 'bushy'"):
        cpu_backend.default_spec("bushy")
    given = argparse.Namespace(spec_steps=None, spec_topk=None, spec_draft_tokens=None,
                               adaptive=False)
    assert _spec(given, cpu_backend) == spec
    wider = _spec(argparse.Namespace(**{**vars(given), "spec_topk": 4}), cpu_backend)
    assert (wider.num_steps, wider.topk, wider.draft_tokens) == (3, 4, 13)  # min(4 * 3 + 1, 16)
    assert _spec(argparse.Namespace(**{**vars(given), "spec_topk": 2}), cpu_backend) == tree
    assert _spec(argparse.Namespace(**{**vars(given), "adaptive": True}), cpu_backend) == adaptive