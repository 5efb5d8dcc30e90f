"""Our Llama family against Hugging Face transformers' own models, on tiny random configs.

The oracle is HF's ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` / ``MistralForCausalLM``
forward over each whole sequence (dense causal attention, no cache), in float32. Our model
loads the HF checkpoint through our loader and runs through the paged reference backend.
Tolerance: atol 1e-4 on logits of magnitude O(1) (float32, different summation orders).
"""

from __future__ import annotations

import random

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.loading.hf import load_hf_model

ATOL = 1e-4


def hf_logits(hf_model, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()  # [len, vocab]


def random_prompts(vocab: int, lengths: list[int], seed: int) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(vocab) for _ in range(n)] for n in lengths]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "mistral"])
def test_ragged_extend_logits_equal_hf(kind, hf_tiny, runtime_for):
    """A ragged EXTEND batch gives HF's logits at every position, per family."""
    hf_model, directory = hf_tiny(kind)
    model = load_hf_model(directory)
    runtime = runtime_for(model.config)
    prompts = random_prompts(model.config.vocab_size, [7, 1, 12], seed=1)
    rows = [runtime.new_request() for _ in prompts]
    batch = runtime.causal_batch(rows, prompts)
    with torch.no_grad():
        logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
    start = 0
    for prompt in prompts:
        expected = hf_logits(hf_model, prompt)
        torch.testing.assert_close(logits[start:start + len(prompt)], expected, atol=ATOL, rtol=0)
        start += len(prompt)


@pytest.mark.parametrize("page_size", [1, 16, 128])
def test_decode_after_extend_equals_full_recompute(page_size, hf_tiny, runtime_for):
    """EXTEND then several DECODE steps over a paged cache equal HF's full recompute."""
    hf_model, directory = hf_tiny("llama", seed=page_size)
    model = load_hf_model(directory)
    runtime = runtime_for(model.config, page_size=page_size)
    sequences = random_prompts(model.config.vocab_size, [5, 9], seed=page_size)
    rows = [runtime.new_request() for _ in sequences]
    with torch.no_grad():
        model(runtime.causal_batch(rows, sequences), runtime.backend)
        rng = random.Random(page_size)
        for _ in range(4):
            step = [[rng.randrange(model.config.vocab_size)] for _ in rows]
            batch = runtime.causal_batch(rows, step, mode=ForwardMode.DECODE)
            logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
            for i, token in enumerate(step):
                sequences[i] = sequences[i] + token
                expected = hf_logits(hf_model, sequences[i])[-1]
                torch.testing.assert_close(logits[i], expected, atol=ATOL, rtol=0)


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 16},
        {"rope_type": "linear", "factor": 2.0},
    ],
    ids=["llama3", "linear"],
)
def test_rope_scaling_equals_hf(rope, hf_tiny, runtime_for):
    """Rotary scaling (llama3, linear) matches HF at positions past the original context."""
    hf_model, directory = hf_tiny("llama", rope_scaling=rope, rope_theta=500000.0, head_dim=32,
                                  num_attention_heads=2, num_key_value_heads=1)
    model = load_hf_model(directory)
    assert model.config.rope_scaling.kind.value == rope["rope_type"]
    runtime = runtime_for(model.config)
    prompt = random_prompts(model.config.vocab_size, [70], seed=3)[0]
    batch = runtime.causal_batch([runtime.new_request()], [prompt])
    with torch.no_grad():
        logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
    torch.testing.assert_close(logits, hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_tied_embeddings_load_without_lm_head(hf_tiny, runtime_for):
    """A SmolLM2-style tied checkpoint (no lm_head.weight saved) loads and matches HF."""
    from safetensors import safe_open

    hf_model, directory = hf_tiny("llama", tie_word_embeddings=True)
    with safe_open(str(directory / "model.safetensors"), "pt") as handle:
        assert "lm_head.weight" not in handle.keys()
    model = load_hf_model(directory)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    runtime = runtime_for(model.config)
    prompt = random_prompts(model.config.vocab_size, [6], seed=4)[0]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
    torch.testing.assert_close(model.compute_logits(out.hidden_states),
                               hf_logits(hf_model, prompt), atol=ATOL, rtol=0)


def test_aux_hidden_states_are_hf_hidden_states(hf_tiny, runtime_for):
    """aux_layers=(i, ...) returns HF's output_hidden_states[i] (0 = embeddings, L = last
    layer before the final norm); hidden_states is HF's final normed state."""
    hf_model, directory = hf_tiny("qwen2")
    model = load_hf_model(directory)
    runtime = runtime_for(model.config)
    prompt = random_prompts(model.config.vocab_size, [8], seed=5)[0]
    layers = (0, 2, 3)
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend,
                    aux_layers=layers)
        hf_out = hf_model.model(input_ids=torch.tensor([prompt]), output_hidden_states=True)
    for index, aux in zip(layers, out.aux_hidden_states, strict=True):
        expected = hf_out.hidden_states[index][0]
        if index == model.config.num_layers:  # HF's last entry is after the final norm
            expected = model.model.norm(aux)
            torch.testing.assert_close(expected, hf_out.last_hidden_state[0], atol=ATOL, rtol=0)
            continue
        torch.testing.assert_close(aux, expected, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.hidden_states, hf_out.last_hidden_state[0], atol=ATOL, rtol=0)


def test_aux_layer_out_of_range_is_rejected(hf_tiny, runtime_for):
    """An aux layer index past num_layers raises ValueError."""
    _, directory = hf_tiny("llama")
    model = load_hf_model(directory)
    runtime = runtime_for(model.config)
    batch = runtime.causal_batch([runtime.new_request()], [[1, 2]])
    with pytest.raises(ValueError, match="aux layer"):
        model(batch, runtime.backend, aux_layers=(model.config.num_layers + 1,))


def test_tree_verify_node_logits_equal_their_path_alone(hf_tiny, runtime_for):
    """TARGET_VERIFY over a random tree: each node's logits equal HF's logits of
    prefix + its root-to-node path run alone."""
    hf_model, directory = hf_tiny("llama", seed=7)
    model = load_hf_model(directory)
    runtime = runtime_for(model.config, page_size=4)
    rng = random.Random(7)
    vocab = model.config.vocab_size
    prefixes = random_prompts(vocab, [6, 11], seed=8)
    rows = [runtime.new_request() for _ in prefixes]
    num_nodes = 7
    with torch.no_grad():
        model(runtime.causal_batch(rows, prefixes), runtime.backend)
        parents = [[-1] + [rng.randrange(i) for i in range(1, num_nodes)] for _ in rows]
        tokens = [[rng.randrange(vocab) for _ in range(num_nodes)] for _ in rows]
        depth = [[0] * num_nodes for _ in rows]
        mask = torch.zeros(len(rows), num_nodes, num_nodes, dtype=torch.bool)
        paths: list[list[list[int]]] = []
        for b, parent in enumerate(parents):
            paths.append([])
            for node in range(num_nodes):
                path, walk = [], node
                while walk != -1:
                    path.append(walk)
                    mask[b, node, walk] = True
                    walk = parent[walk]
                depth[b][node] = len(path) - 1
                paths[b].append(path[::-1])
        batch = runtime.causal_batch(rows, tokens, mode=ForwardMode.TARGET_VERIFY)
        batch.positions = torch.tensor(
            [len(prefixes[b]) + depth[b][n] for b in range(len(rows)) for n in range(num_nodes)]
        )
        batch.tree_mask = mask
        logits = model.compute_logits(model(batch, runtime.backend).hidden_states)
    for b in range(len(rows)):
        for node in range(num_nodes):
            sequence = prefixes[b] + [tokens[b][n] for n in paths[b][node]]
            expected = hf_logits(hf_model, sequence)[-1]
            torch.testing.assert_close(logits[b * num_nodes + node], expected, atol=ATOL, rtol=0)
