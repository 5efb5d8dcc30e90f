"""Rotary cos/sin, tabulated (``RotaryEmbedding.prepare``) and computed per forward, against
cos and sin of ``position * theta ** (-2i / head_dim)`` in float64 (Python's math)."""

from __future__ import annotations

import math

import pytest
import torch
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.layers import RotaryEmbedding
from torch.utils._python_dispatch import TorchDispatchMode

THETA, HEAD_DIM = 10000.0, 16


def _config(max_positions: int) -> ModelConfig:
    return ModelConfig(architecture="llama", vocab_size=64, hidden_size=32, intermediate_size=64,
                       num_layers=1, num_heads=2, num_kv_heads=1, head_dim=HEAD_DIM,
                       max_position_embeddings=max_positions, rope_theta=THETA)


def _oracle(positions: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    half = [THETA ** (-2 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)]
    angles = [[p * f for f in half + half] for p in positions]
    cos = torch.tensor([[math.cos(a) for a in row] for row in angles], dtype=torch.float64)
    sin = torch.tensor([[math.sin(a) for a in row] for row in angles], dtype=torch.float64)
    return cos, sin


@pytest.mark.parametrize("tabulated", [True, False])
def test_cos_sin_match_the_formula(tabulated: bool) -> None:
    """Any positions in any order, up to the model's last one; float32, whose product
    ``position * frequency`` is off by up to ~1e-4 rad at position 1023."""
    rotary = RotaryEmbedding(_config(1024), "cpu")
    assert rotary.prepare(torch.float32) if tabulated else True
    positions = [1023, 0, 5, 5, 700, 1, 64]
    cos, sin = rotary.cos_sin(torch.tensor(positions), torch.float32)
    want_cos, want_sin = _oracle(positions)
    assert cos.shape == sin.shape == (len(positions), HEAD_DIM)
    assert cos.dtype == sin.dtype == torch.float32
    torch.testing.assert_close(cos.double(), want_cos, atol=2e-4, rtol=0)
    torch.testing.assert_close(sin.double(), want_sin, atol=2e-4, rtol=0)


def test_a_table_per_dtype_and_none_past_the_limit() -> None:
    rotary = RotaryEmbedding(_config(64), "cpu")
    assert rotary.prepare(torch.bfloat16) and rotary.prepare(torch.bfloat16)  # idempotent
    cos, _ = rotary.cos_sin(torch.tensor([3, 2]), torch.bfloat16)
    assert cos.dtype == torch.bfloat16
    cos32, _ = rotary.cos_sin(torch.tensor([3, 2]), torch.float32)  # no float32 table
    torch.testing.assert_close(cos.float(), cos32, atol=1e-2, rtol=0)
    big = RotaryEmbedding(_config(RotaryEmbedding.MAX_TABLE_POSITIONS + 1), "cpu")
    assert not big.prepare(torch.float32)
    cos, sin = big.cos_sin(torch.tensor([RotaryEmbedding.MAX_TABLE_POSITIONS]), torch.float32)
    want_cos, want_sin = _oracle([RotaryEmbedding.MAX_TABLE_POSITIONS])
    torch.testing.assert_close(cos.double(), want_cos, atol=2e-3, rtol=0)
    torch.testing.assert_close(sin.double(), want_sin, atol=2e-3, rtol=0)


class _Ops(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.names: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001, ANN204
        self.names.append(func.__name__.split(".")[0])
        return func(*args, **(kwargs or {}))


def test_the_engine_gathers_cos_sin_from_its_table() -> None:
    """A model the engine runs was prepared: its decode steps compute no cos or sin."""
    from eagle_hal import LLM, SamplingParams, select_backend
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    target = tiny_target(seed=3)
    llm = LLM.from_models(select_backend("cpu"), target, tiny_eagle1(target), None,
                          SpecConfig(num_steps=2, topk=1), max_context=128)
    request = llm.engine.add_request([5, 6, 7], SamplingParams(max_tokens=8, ignore_eos=True))
    llm.engine.step()  # the prefill
    with _Ops() as ops:
        llm.engine.step()
    assert request.output_ids and "index_select" in ops.names
    assert "cos" not in ops.names and "sin" not in ops.names


def test_a_head_with_fewer_positions_than_the_engine_context() -> None:
    """A draft head whose config names fewer positions than its target (as published
    EAGLE heads may) still drafts past them: the table covers the engine's context."""
    import dataclasses

    from eagle_hal import LLM, SamplingParams, select_backend
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    target = tiny_target(seed=3)
    head = tiny_eagle1(target)
    head.config = dataclasses.replace(head.config, max_position_embeddings=16)
    head.rotary = RotaryEmbedding(head.config, "cpu")
    llm = LLM.from_models(select_backend("cpu"), target, head, None,
                          SpecConfig(num_steps=3, topk=1), max_context=128)
    request = llm.engine.add_request(list(range(5, 25)),
                                     SamplingParams(max_tokens=12, ignore_eos=True))
    llm.engine.run()
    assert len(request.output_ids) == 12
