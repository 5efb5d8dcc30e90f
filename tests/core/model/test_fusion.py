"""Inference fusion (``model/fusion.py``): one Q/K/V GEMM, one gate/up GEMM, a backend's
model kernels, and nothing else changed.

Oracles: Hugging Face transformers' logits and hidden states (float32, atol 1e-4), the same
checkpoint loaded unfused, and the checkpoint tensors themselves (names, values, a
tensor-parallel rank's hand-sliced shards). The Triton kernels run under TRITON_INTERPRET=1
without an accelerator.
"""

from __future__ import annotations

import importlib.util
import os
import random

import pytest
import torch
from eagle_hal.backends.cpu.kernels import cpu_model_kernels
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.model.loading.hf import load_hf_model
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS

ATOL = 1e-4
HAS_TRITON = importlib.util.find_spec("triton") is not None
RUNS_TRITON = HAS_TRITON and (
    os.environ.get("TRITON_INTERPRET") == "1" or torch.accelerator.is_available()
)


def kernels_named(name: str):
    if name == "reference":
        return REFERENCE_MODEL_KERNELS
    if name == "cpu":  # the reference with the CPU backend's transposed lm_head product
        return cpu_model_kernels()
    if not RUNS_TRITON:
        pytest.skip("Triton kernels need triton and an accelerator or TRITON_INTERPRET=1")
    from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

    return TRITON_MODEL_KERNELS


def hf_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()


def prompts_for(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


def run_decode(model, runtime, prompts, steps: int, seed: int):
    """EXTEND over ``prompts`` then ``steps`` DECODE steps: (logits per forward, sequences)."""
    rows = [runtime.new_request() for _ in prompts]
    sequences = [list(p) for p in prompts]
    rng = random.Random(seed)
    outputs = []
    with torch.no_grad():
        out = model(runtime.causal_batch(rows, prompts), runtime.backend)
        outputs.append(model.compute_logits(out.hidden_states))
        for _ in range(steps):
            step = [[rng.randrange(model.config.vocab_size)] for _ in rows]
            batch = runtime.causal_batch(rows, step, mode=ForwardMode.DECODE)
            outputs.append(model.compute_logits(model(batch, runtime.backend).hidden_states))
            for sequence, token in zip(sequences, step, strict=True):
                sequence += token
    return outputs, sequences


@pytest.mark.parametrize("kernels", ["reference", "cpu", "triton"])
@pytest.mark.parametrize("kind", ["llama", "qwen2"])
def test_fused_model_logits_equal_unfused_and_hf(kind, kernels, hf_tiny, runtime_for):
    """EXTEND then DECODE: the fused model's logits equal the unfused model's and HF's
    (qwen2: the Q/K/V biases fuse too)."""
    hf_model, directory = hf_tiny(kind, seed=3)
    unfused, model = load_hf_model(directory), load_hf_model(directory)
    model.fuse_for_inference(kernels_named(kernels))
    prompts = prompts_for(model.config.vocab_size, [7, 1, 12], seed=2)
    expected, _ = run_decode(unfused, runtime_for(unfused.config), prompts, steps=3, seed=5)
    actual, sequences = run_decode(model, runtime_for(model.config), prompts, steps=3, seed=5)
    for a, e in zip(actual, expected, strict=True):
        torch.testing.assert_close(a, e, atol=ATOL, rtol=0)
    for i, sequence in enumerate(sequences):
        torch.testing.assert_close(actual[-1][i], hf_logits(hf_model, sequence)[-1], atol=ATOL,
                                   rtol=0)


@pytest.mark.parametrize("kernels", ["reference", "triton"])
def test_fused_aux_hidden_states_are_hf_hidden_states(kernels, hf_tiny, runtime_for):
    """aux_layers of a fused model are HF's output_hidden_states, the last one included."""
    hf_model, directory = hf_tiny("qwen2", seed=4)
    model = load_hf_model(directory)
    model.fuse_for_inference(kernels_named(kernels))
    runtime = runtime_for(model.config)
    prompt = prompts_for(model.config.vocab_size, [9], seed=6)[0]
    layers = (0, 2, model.config.num_layers)
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend,
                    aux_layers=layers)
        hf_out = hf_model.model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
    for index, aux in zip(layers[:-1], out.aux_hidden_states, strict=False):
        torch.testing.assert_close(aux, hf_out.hidden_states[index][0], atol=ATOL, rtol=0)
    last = hf_model.model.norm(out.aux_hidden_states[-1])
    torch.testing.assert_close(last, hf_out.last_hidden_state[0], atol=ATOL, rtol=0)
    torch.testing.assert_close(out.hidden_states, hf_out.last_hidden_state[0], atol=ATOL, rtol=0)


def test_fusion_keeps_names_values_and_memory(hf_tiny):
    """state_dict names and values are unchanged; each projection's parameters are views of
    the fused weight (no second copy); fusing again changes nothing."""
    _, directory = hf_tiny("qwen2")
    model = load_hf_model(directory)
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    model.fuse_for_inference()
    after = model.state_dict()
    assert list(after) == list(before)
    for name, tensor in before.items():
        assert torch.equal(after[name], tensor), name
    attention, mlp = model.model.layers[1].self_attn, model.model.layers[1].mlp
    weight, bias = attention._qkv
    assert attention.q_proj.weight.data_ptr() == weight.data_ptr()
    assert attention.v_proj.bias.data_ptr() == bias[-attention.v_proj.bias.shape[0]:].data_ptr()
    assert mlp.up_proj.weight.data_ptr() == mlp._gate_up[mlp.gate_proj.weight.shape[0]:].data_ptr()
    assert not attention.q_proj.weight.requires_grad
    model.fuse_for_inference()
    assert attention._qkv[0] is weight


def test_weights_loaded_after_fusion_reach_the_fused_projections(hf_tiny, runtime_for):
    """Loading another checkpoint into a fused model (by name, as the loaders do) gives that
    checkpoint's logits: the fused weights are the parameters."""
    _, first = hf_tiny("llama", seed=1)
    hf_model, second = hf_tiny("llama", seed=2)
    model = load_hf_model(first)
    model.fuse_for_inference()
    model.load_weights(load_hf_model(second).state_dict().items(), source="second")
    prompt = prompts_for(model.config.vocab_size, [8], seed=7)[0]
    runtime = runtime_for(model.config)
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_cast_model_is_fused_again(hf_tiny, runtime_for):
    """After ``.to()`` (fresh parameter storage) fusing again rebuilds the fused weights."""
    _, directory = hf_tiny("llama")
    model = load_hf_model(directory)
    model.fuse_for_inference()
    stale = model.model.layers[0].self_attn._qkv[0]
    model.to(torch.float64)
    model.fuse_for_inference()
    fresh = model.model.layers[0].self_attn._qkv[0]
    assert fresh is not stale and fresh.dtype == torch.float64
    assert model.model.layers[0].self_attn.k_proj.weight.data_ptr() == fresh[
        model.model.layers[0].self_attn.q_proj.weight.shape[0]].data_ptr()


def test_tensor_parallel_rank_fuses_its_own_shards(tmp_path, hf_tiny):
    """A rank's fused Q/K/V (gate/up) weight is its slices of q, k, v (gate, up), in order."""
    from eagle_hal.parallel import ParallelContext, shard_llama

    hf_model, directory = hf_tiny("qwen2", num_attention_heads=4, num_key_value_heads=2)
    whole = load_hf_model(directory)
    hf_state = hf_model.state_dict()
    world = 2
    for rank in range(world):
        model = shard_llama(whole, ParallelContext(rank=rank, world_size=world, group=object()))
        fuse_for_inference(REFERENCE_MODEL_KERNELS, model)
        prefix = "model.layers.1"
        attention = model.model.layers[1].self_attn
        def local(name: str) -> torch.Tensor:
            return hf_state[f"{prefix}.{name}"].chunk(world)[rank]  # noqa: B023

        expected_weight = torch.cat([local(f"self_attn.{p}_proj.weight") for p in "qkv"])
        expected_bias = torch.cat([local(f"self_attn.{p}_proj.bias") for p in "qkv"])
        assert torch.equal(attention._qkv[0], expected_weight)
        assert torch.equal(attention._qkv[1], expected_bias)
        gate_up = torch.cat([local(f"mlp.{p}_proj.weight") for p in ("gate", "up")])
        assert torch.equal(model.model.layers[1].mlp._gate_up, gate_up)


def counting(kernels, calls: list[str]):
    """``kernels`` whose fused projections record each call's name in ``calls``."""
    import dataclasses

    fused = kernels.fused_linear

    def spy(name):
        def call(*args, **kwargs):
            calls.append(name)
            return getattr(fused, name)(*args, **kwargs)
        return call

    wrapped = dataclasses.replace(
        fused, qkv_rotary=spy("qkv_rotary"), gate_up_silu=spy("gate_up_silu"),
        linear=spy("linear"),
    )
    return dataclasses.replace(kernels, fused_linear=wrapped)


@pytest.mark.parametrize("kernels_name,length,fused_path", [
    ("triton", 5, True), ("triton", 65, False), ("cpu", 1, True), ("cpu", 16, True),
    ("cpu", 17, False),
])
def test_small_forwards_take_the_fused_projections(kernels_name, length, fused_path, hf_tiny,
                                                   runtime_for):
    """Forwards of at most ``max_tokens`` rows (Triton 64, the CPU's transposed GEMMs 16) run
    every layer through the fused projection kernels (four calls a layer), larger ones
    through the GEMMs; both give HF's logits."""
    hf_model, directory = hf_tiny("qwen2", seed=8)
    model = load_hf_model(directory)
    calls: list[str] = []
    kernels = counting(kernels_named(kernels_name), calls)
    assert kernels.fused_linear.max_tokens == (64 if kernels_name == "triton" else 16)
    model.fuse_for_inference(kernels)
    prompt = prompts_for(model.config.vocab_size, [length], seed=9)[0]
    runtime = runtime_for(model.config)
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    layers = model.config.num_layers
    expected = ["qkv_rotary", "linear", "gate_up_silu", "linear"] * layers if fused_path else []
    assert calls == expected
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


class _TritonBackend:
    """Stands in for a backend whose capabilities say Triton runs (``Backend.model_kernels``
    reads nothing else)."""

    capabilities = type("Caps", (), {"triton": True, "dependent_launch": False})()


def test_fused_linear_can_be_switched_off(hf_tiny, runtime_for):
    """The Triton kernels with ``fused_linear=None`` (``dataclasses.replace``, for A/B
    measurements; the engine takes them as ``LLM(model_kernels=...)``) run every layer
    through the GEMMs, and still give HF's logits."""
    import dataclasses

    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.backend import Backend
    from eagle_hal.model.layers import fused_kernels_for

    if not HAS_TRITON:
        pytest.skip("needs triton")
    assert Backend.model_kernels(_TritonBackend()).fused_linear is not None
    kernels = dataclasses.replace(Backend.model_kernels(_TritonBackend()), fused_linear=None)
    hf_model, directory = hf_tiny("qwen2", seed=8)
    model = load_hf_model(directory)
    LLM.from_models(select_backend("cpu"), model, None, model_kernels=kernels)
    layer = model.model.layers[0]
    assert layer.mlp.kernels is kernels and layer.self_attn.kernels is kernels
    prompt = prompts_for(model.config.vocab_size, [5], seed=9)[0]
    x = torch.zeros(len(prompt), model.config.hidden_size)
    assert fused_kernels_for(x, layer.self_attn, layer.mlp) is None
    if not RUNS_TRITON:
        return
    runtime = runtime_for(model.config)
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_the_draft_topk_kernel_can_be_switched_off():
    """The Triton kernels with ``softmax_topk=None`` (for A/B measurements) keep the fused
    projections, and a head given such kernels drafts through torch's softmax and topk,
    with the candidates of the one-pass kernel's place."""
    import dataclasses

    from eagle_hal.backend import Backend
    from eagle_hal.testing.models import tiny_eagle1, tiny_target

    if not HAS_TRITON:
        pytest.skip("needs triton")
    triton_kernels = Backend.model_kernels(_TritonBackend())
    assert triton_kernels.softmax_topk is not None
    kernels = dataclasses.replace(triton_kernels, softmax_topk=None)
    assert kernels.softmax_topk is None and kernels.fused_linear is not None
    calls = []

    def recorded(logits, k):
        calls.append(k)
        return torch.softmax(logits.float(), dim=-1).topk(k, dim=-1)

    head = tiny_eagle1(tiny_target(seed=3), seed=4)
    hidden = torch.randn(3, head.config.hidden_size, generator=torch.Generator().manual_seed(5))
    head.fuse_for_inference(dataclasses.replace(REFERENCE_MODEL_KERNELS, softmax_topk=recorded))
    with torch.no_grad():
        through_kernel = head.topk(hidden, 2)
    assert calls == [2]
    head.fuse_for_inference(dataclasses.replace(REFERENCE_MODEL_KERNELS, softmax_topk=None))
    with torch.no_grad():
        through_torch = head.topk(hidden, 2)
    assert calls == [2]  # the kernel is not called again
    torch.testing.assert_close(through_torch, through_kernel, atol=0, rtol=0)


@pytest.mark.parametrize("dtype,rows,fused_path", [
    (torch.bfloat16, 1, True), (torch.bfloat16, 16, True), (torch.bfloat16, 17, False),
    (torch.float16, 32, False), (torch.float32, 17, True), (torch.float32, 32, True),
    (torch.float32, 65, False),
])
def test_16_bit_forwards_past_16_rows_take_the_gemms(dtype, rows, fused_path, hf_tiny):
    """With the Triton kernels, 16-bit forwards of 17-32 rows run through the GEMMs (on the
    H200 a 32-row bf16 layer took 36.0 us fused against 24.0 unfused); float32 keeps the
    fused path up to ``max_tokens`` (64)."""
    from eagle_hal.model.layers import fused_kernels_for

    _, directory = hf_tiny("llama", seed=3)
    model = load_hf_model(directory).to(dtype)
    model.fuse_for_inference(kernels_named("triton"))
    layer = model.model.layers[0]
    x = torch.zeros(rows, model.config.hidden_size, dtype=dtype)
    assert (fused_kernels_for(x, layer.self_attn, layer.mlp) is not None) == fused_path


def test_the_16_bit_fused_row_limit_can_be_set_for_measurements(hf_tiny):
    """``fused_linear_kernels(max_tokens_16bit=...)`` moves the limit within 1-64, for A/B
    runs (32: 16-bit forwards of 17-32 rows take the fused path too); anything else is
    refused with the field named."""
    if not HAS_TRITON:
        pytest.skip("needs triton")
    import dataclasses

    from eagle_hal.model.layers import fused_kernels_for
    from eagle_hal.ops.triton.fused_linear import FUSED_LINEAR_KERNELS, fused_linear_kernels

    assert FUSED_LINEAR_KERNELS.max_tokens_16bit == 16
    wide = fused_linear_kernels(max_tokens_16bit=32)
    assert wide.max_tokens_16bit == 32
    _, directory = hf_tiny("llama", seed=3)
    model = load_hf_model(directory).to(torch.bfloat16)
    model.fuse_for_inference(dataclasses.replace(REFERENCE_MODEL_KERNELS, fused_linear=wide))
    layer = model.model.layers[0]
    for rows, fused_path in ((17, True), (32, True), (33, False)):
        x = torch.zeros(rows, model.config.hidden_size, dtype=torch.bfloat16)
        assert (fused_kernels_for(x, layer.self_attn, layer.mlp) is not None) == fused_path
    for bad in (0, 65):
        with pytest.raises(ValueError, match="max_tokens_16bit"):
            fused_linear_kernels(max_tokens_16bit=bad)
