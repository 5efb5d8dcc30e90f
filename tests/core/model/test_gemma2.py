"""Gemma 2 against Hugging Face transformers' ``Gemma2ForCausalLM`` on a tiny random config:
``1 + w`` RMSNorms before and after attention and the MLP, GELU-tanh gating, attention
scores scaled by ``query_pre_attn_scalar`` and soft-capped (``tanh(s / c) * c``), final
logits soft-capped, sliding and global layers alternating. The caps are set small so that
they change the result; HF runs its eager attention, which applies the score cap.
"""

from __future__ import annotations

import random

import torch
from eagle_hal.model.loading.hf import load_hf_model

ATOL = 1e-4
WINDOW = 16


def save_gemma2(directory, seed: int = 0):
    import transformers

    torch.manual_seed(seed)
    config = transformers.Gemma2Config(
        vocab_size=89, hidden_size=64, intermediate_size=96, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, query_pre_attn_scalar=24,
        sliding_window=WINDOW, max_position_embeddings=256, attn_logit_softcapping=2.0,
        final_logit_softcapping=3.0, attn_implementation="eager")
    model = transformers.Gemma2ForCausalLM(config).float().eval()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            param.copy_(noise * (0.3 if name.endswith("norm.weight") else
                                 0.5 if "embed" in name else 0.1))
    model.save_pretrained(directory, safe_serialization=True)
    return model


def hf_logits(hf_model, ids):
    with torch.no_grad():
        return hf_model(input_ids=torch.tensor([ids])).logits[0].float()


def test_config_reads_gemma2_fields(tmp_path):
    save_gemma2(tmp_path)
    config = load_hf_model(tmp_path, progress=False).config
    assert config.attn_logit_softcap == 2.0 and config.final_logit_softcap == 3.0
    assert config.layer_windows == (WINDOW, None, WINDOW, None)


def test_prefill_logits_equal_hf(tmp_path, runtime_for):
    hf_model = save_gemma2(tmp_path, seed=1)
    model = load_hf_model(tmp_path, progress=False)
    runtime = runtime_for(model.config)
    rng = random.Random(2)
    batch_prompts = [[rng.randrange(89) for _ in range(n)] for n in (5, 1, WINDOW)]
    rows = [runtime.new_request() for _ in batch_prompts]
    with torch.no_grad():
        out = model(runtime.causal_batch(rows, batch_prompts), runtime.backend)
        logits = model.compute_logits(out.hidden_states)
    assert logits.abs().max() <= 3.0 + 1e-5  # the final cap bounds every logit
    start = 0
    for prompt in batch_prompts:
        stop = start + len(prompt)
        torch.testing.assert_close(logits[start:stop], hf_logits(hf_model, prompt),
                                   atol=ATOL, rtol=0)
        start = stop


def test_the_engine_runs_past_the_window_as_hf(tmp_path):
    """Plain and chain speculation (the n-gram drafter) over a Gemma 2 target emit HF's
    greedy continuation, past the sliding window."""
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig
    from eagle_hal.speculative.ngram import NgramDrafter

    hf_model = save_gemma2(tmp_path, seed=3)
    model = load_hf_model(tmp_path, progress=False)
    rng = random.Random(3)
    prompt = [rng.randrange(89) for _ in range(WINDOW + 4)]
    prompt = prompt + prompt[:8]  # a repeat, so the n-gram drafter proposes
    sequence = list(prompt)
    for _ in range(8):  # HF's greedy continuation, one full recompute per token
        sequence.append(int(hf_logits(hf_model, sequence)[-1].argmax()))
    expected = sequence[len(prompt):]
    backend = select_backend("cpu")
    for spec, drafter in ((SpecConfig(num_steps=0), None), (SpecConfig(3), NgramDrafter(3, 1))):
        llm = LLM.from_models(backend, model, None, spec=spec, max_context=128,
                              drafter=drafter)
        out = llm.generate([prompt], SamplingParams(max_tokens=8, ignore_eos=True))[0]
        assert list(out.token_ids) == expected
