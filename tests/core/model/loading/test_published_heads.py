"""Draft heads in the layouts their publishers ship, built here with the published tensor
names, shapes and config keys, and checked against a small dense reimplementation.

Layouts: the EAGLE authors' EAGLE-1/2 ``pytorch_model.bin`` (``fc`` with bias,
``layers.0.*`` without an input norm, the target's ``embed_tokens.weight`` stored along,
a ``LlamaForCausalLM`` config with ``bias``), the same as safetensors without the
embedding, the authors' EAGLE-3 ``pytorch_model.bin`` (``fc`` over three features,
``midlayer.*``, ``norm``, ``lm_head`` over a draft vocabulary, ``d2t``/``t2d``, default
feature layers), SpecForge's EAGLE-3 ``model.safetensors`` (``target_hidden_size``,
``eagle_config.eagle_aux_hidden_state_layer_ids``) and an export naming everything
under ``model.``.

The oracle (``dense_head_logits``) takes the checkpoint tensors and Hugging Face's own
target hidden states and computes the head's logits over the target vocabulary in float64
with dense causal attention. Tolerance: atol 1e-4.

Also here: what the ``.bin`` reader refuses (pickled objects, legacy files, old torch) and
a head for another target refused before the target's weights are opened.
"""

from __future__ import annotations

import json
import math
import os
import random

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.errors import CorruptFileError, UnsupportedModelError
from eagle_hal.model.loading import HeadTargetMismatch, load_eagle_head
from eagle_hal.model.loading.hf import load_hf_model
from eagle_hal.model.loading.torch_bin import read_torch_bin
from safetensors.torch import save_file

H, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, DRAFT_VOCAB = 64, 4, 2, 16, 96, 97, 40
TARGET_LAYERS = 6
EPS, THETA = 1e-5, 10000.0
ATOL = 1e-4


def _attention_and_mlp(prefix: str, width: int) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, width),
        f"{prefix}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, width),
        f"{prefix}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, width),
        f"{prefix}.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        f"{prefix}.post_attention_layernorm.weight": (H,),
        f"{prefix}.mlp.gate_proj.weight": (FFN, H),
        f"{prefix}.mlp.up_proj.weight": (FFN, H),
        f"{prefix}.mlp.down_proj.weight": (H, FFN),
    }


def _random(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=generator)
        out[name] = 1 + 0.1 * noise if name.endswith("norm.weight") else 0.08 * noise
    return out


def _llama_config(**extra) -> dict:
    """A head config.json in the LlamaForCausalLM style the publishers use."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "hidden_size": H, "intermediate_size": FFN, "num_attention_heads": HEADS,
            "num_key_value_heads": KV_HEADS, "num_hidden_layers": 1, "rms_norm_eps": EPS,
            "rope_theta": THETA, "max_position_embeddings": 2048, "vocab_size": VOCAB,
            "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "torch_dtype": "float16",
            "initializer_range": 0.02, "pretraining_tp": 1, "use_cache": True,
            "tie_word_embeddings": False, "transformers_version": "4.28.1", **extra}


def eagle1_tensors(seed: int) -> dict[str, torch.Tensor]:
    shapes = {"fc.weight": (H, 2 * H), "fc.bias": (H,), **_attention_and_mlp("layers.0", H)}
    return _random(shapes, seed)


def eagle3_tensors(seed: int) -> tuple[dict[str, torch.Tensor], list[int]]:
    shapes = {"fc.weight": (H, 3 * H), "midlayer.hidden_norm.weight": (H,),
              "midlayer.input_layernorm.weight": (H,), **_attention_and_mlp("midlayer", 2 * H),
              "norm.weight": (H,), "lm_head.weight": (DRAFT_VOCAB, H)}
    tensors = _random(shapes, seed)
    kept = sorted(random.Random(seed).sample(range(VOCAB), DRAFT_VOCAB))
    tensors["d2t"] = torch.tensor(kept, dtype=torch.int64) - torch.arange(DRAFT_VOCAB)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[kept] = True
    tensors["t2d"] = t2d
    return tensors, kept


def write_layout(layout: str, directory, embedding: torch.Tensor):
    """Write ``layout`` into ``directory``; returns (tensors, draft ids or None, aux
    layers the head reads: HF hidden_states indices, or None for EAGLE-1)."""
    directory.mkdir(parents=True)
    if layout == "eagle1-bin":  # SafeAILab EAGLE-1/EAGLE-2
        tensors = eagle1_tensors(1)
        torch.save({**tensors, "embed_tokens.weight": embedding.clone()},
                   directory / "pytorch_model.bin")
        config, kept, aux = _llama_config(bias=True), None, None
    elif layout == "eagle1-safetensors":  # the same head converted, without the embedding
        tensors = eagle1_tensors(2)
        save_file(tensors, str(directory / "model.safetensors"))
        config, kept, aux = _llama_config(bias=True), None, None
    elif layout == "eagle3-bin":  # SafeAILab EAGLE-3: default feature layers
        tensors, kept = eagle3_tensors(3)
        torch.save(tensors, directory / "pytorch_model.bin")
        config = _llama_config(architectures=["LlamaForCausalLMEagle3"],
                               draft_vocab_size=DRAFT_VOCAB, bias=False)
        aux = (2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)
    elif layout == "eagle3-specforge":  # SpecForge / SGLang: configured feature layers
        tensors, kept = eagle3_tensors(4)
        save_file({**tensors, "embed_tokens.weight": embedding.clone()},
                  str(directory / "model.safetensors"))
        config = _llama_config(architectures=["LlamaForCausalLMEagle3"],
                               draft_vocab_size=DRAFT_VOCAB, target_hidden_size=H,
                               eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4],
                                             "use_aux_hidden_state": True})
        aux = (1, 3, 5)
    elif layout == "eagle3-model-prefix":  # an export naming every tensor but lm_head model.*
        tensors, kept = eagle3_tensors(5)
        named = {("" if n == "lm_head.weight" else "model.") + n: t for n, t in tensors.items()}
        save_file(named, str(directory / "model.safetensors"))
        config = _llama_config(architectures=["LlamaForCausalLMEagle3"],
                               draft_vocab_size=DRAFT_VOCAB)
        aux = (2, TARGET_LAYERS // 2, TARGET_LAYERS - 3)
    else:
        raise AssertionError(layout)
    (directory / "config.json").write_text(json.dumps(config))
    return tensors, kept, aux


# -- the oracle ----------------------------------------------------------------------------

def _norm(x, weight):
    x = x.double()
    return weight.double() * x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + EPS)


def _rotate(x, positions):
    half = HEAD_DIM // 2
    freq = 1.0 / THETA ** (torch.arange(half, dtype=torch.float64) / half)
    angle = positions.double()[:, None, None] * freq  # [T, 1, half]
    first, second = x[..., :half], x[..., half:]
    return torch.cat([first * angle.cos() - second * angle.sin(),
                      second * angle.cos() + first * angle.sin()], -1)


def dense_head_logits(layout, w, embedding, lm_head, hf_hidden, tokens, kept):
    """Logits ``[T, VOCAB]`` (float64) of the head over ``tokens`` whose features are
    ``hf_hidden`` (EAGLE-1: final normed states; EAGLE-3: the three streams, concatenated)."""
    n = len(tokens)
    emb = embedding.double()[torch.tensor(tokens)]
    if layout.startswith("eagle1"):
        x = torch.cat([emb, hf_hidden.double()], -1) @ w["fc.weight"].double().T
        x = x + w["fc.bias"].double()
        attention_input, residual, prefix = x, x, "layers.0"
    else:
        feature = hf_hidden.double() @ w["fc.weight"].double().T
        attention_input = torch.cat([_norm(emb, w["midlayer.input_layernorm.weight"]),
                                     _norm(feature, w["midlayer.hidden_norm.weight"])], -1)
        residual, prefix = feature, "midlayer"

    def proj(x, name):
        return x @ w[f"{prefix}.{name}.weight"].double().T

    positions = torch.arange(n)
    q = _rotate(proj(attention_input, "self_attn.q_proj").view(n, HEADS, HEAD_DIM), positions)
    k = _rotate(proj(attention_input, "self_attn.k_proj").view(n, KV_HEADS, HEAD_DIM), positions)
    v = proj(attention_input, "self_attn.v_proj").view(n, KV_HEADS, HEAD_DIM)
    group = HEADS // KV_HEADS
    out = torch.empty(n, HEADS, HEAD_DIM, dtype=torch.float64)
    for head in range(HEADS):
        scores = q[:, head] @ k[:, head // group].T / math.sqrt(HEAD_DIM)
        scores = scores.masked_fill(torch.ones(n, n).triu(1).bool(), float("-inf"))
        out[:, head] = torch.softmax(scores, -1) @ v[:, head // group]
    hidden = residual + proj(out.reshape(n, -1), "self_attn.o_proj")
    normed = _norm(hidden, w[f"{prefix}.post_attention_layernorm.weight"])
    gate, up = proj(normed, "mlp.gate_proj"), proj(normed, "mlp.up_proj")
    hidden = hidden + proj(torch.nn.functional.silu(gate) * up, "mlp.down_proj")
    if layout.startswith("eagle1"):
        return hidden @ lm_head.double().T
    draft = _norm(hidden, w["norm.weight"]) @ w["lm_head.weight"].double().T
    full = torch.full((n, VOCAB), float("-inf"), dtype=torch.float64)
    full[:, kept] = draft
    return full


def _hf_target(directory, seed=31, **overrides):
    import transformers

    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=H, intermediate_size=FFN,
        num_hidden_layers=TARGET_LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS, max_position_embeddings=256, rms_norm_eps=EPS,
        **overrides)
    model = transformers.LlamaForCausalLM(config).float().eval()
    with torch.no_grad():
        for name, param in model.named_parameters():
            if not name.endswith("norm.weight"):
                param.normal_(0.0, 0.2 if "embed" in name else 0.05)
    model.save_pretrained(directory, safe_serialization=True)
    return model


LAYOUTS = ["eagle1-bin", "eagle1-safetensors", "eagle3-bin", "eagle3-specforge",
           "eagle3-model-prefix"]


@pytest.mark.parametrize("layout", LAYOUTS)
def test_published_layout_loads_and_drafts_like_the_dense_oracle(layout, tmp_path, new_runtime):
    hf_model = _hf_target(tmp_path / "target")
    model = load_hf_model(tmp_path / "target", progress=False)
    embedding = model.model.embed_tokens.weight.detach()
    tensors, kept, aux = write_layout(layout, tmp_path / "head", embedding)
    head = load_eagle_head(tmp_path / "head", model)
    if aux is not None:
        assert head.aux_layers == aux
    tokens = [random.Random(layout).randrange(VOCAB) for _ in range(9)]
    with torch.no_grad():
        hf_out = hf_model.model(input_ids=torch.tensor([tokens]), output_hidden_states=True)
        if aux is None:
            hf_features = hf_out.last_hidden_state[0]
        else:
            hf_features = torch.cat([hf_out.hidden_states[i][0] for i in aux], -1)
        runtime = new_runtime(num_layers=model.config.num_layers, num_heads=HEADS,
                              num_kv_heads=KV_HEADS, head_dim=HEAD_DIM)
        target_batch = runtime.causal_batch([runtime.new_request()], [tokens])
        features = head.project_target_features(
            model(target_batch, runtime.backend, aux_layers=head.aux_layers))
        draft_rt = new_runtime(num_layers=1, num_heads=HEADS, num_kv_heads=KV_HEADS,
                               head_dim=HEAD_DIM, page_size=4)
        batch = draft_rt.causal_batch([draft_rt.new_request()], [tokens],
                                      mode=ForwardMode.DRAFT_EXTEND)
        logits = head.compute_logits(head(batch, draft_rt.backend, None, features))
    expected = dense_head_logits(layout, tensors, embedding, hf_model.lm_head.weight.detach(),
                                 hf_features, tokens, kept)
    finite = torch.isfinite(expected)
    assert torch.equal(torch.isfinite(logits), finite)
    torch.testing.assert_close(logits[finite].double(), expected[finite], atol=ATOL, rtol=0)


# -- what the .bin reader refuses ------------------------------------------------------------

class Payload:
    """An object whose unpickling would run a command (creating ``marker``)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_a_bin_with_a_pickled_object_is_refused_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "pytorch_model.bin"
    torch.save({"fc.weight": torch.zeros(2, 2), "extra": Payload(marker)}, path)
    with pytest.raises(CorruptFileError, match="objects other than tensors"):
        read_torch_bin(path)
    assert not marker.exists()
    head = tmp_path / "head"
    head.mkdir()
    path.rename(head / "pytorch_model.bin")
    (head / "config.json").write_text(json.dumps(_llama_config()))
    hf_target_dir = tmp_path / "target"
    _hf_target(hf_target_dir)
    with pytest.raises(CorruptFileError, match="pytorch_model.bin"):
        load_eagle_head(head, load_hf_model(hf_target_dir, progress=False))
    assert not marker.exists()


@pytest.mark.parametrize("contents", ["legacy", "garbage", "list", "nested"])
def test_bins_that_are_not_a_state_dict_are_corrupt(tmp_path, contents):
    path = tmp_path / "pytorch_model.bin"
    if contents == "legacy":
        torch.save({"x": torch.zeros(1)}, path, _use_new_zipfile_serialization=False)
        message = "not a zip-format"
    elif contents == "garbage":
        path.write_bytes(b"PK\x03\x04 not really a zip")
        message = "not a zip-format|not a readable"
    elif contents == "list":
        torch.save([torch.zeros(1)], path)
        message = "flat mapping"
    else:
        torch.save({"x": {"y": torch.zeros(1)}}, path)
        message = "flat mapping"
    with pytest.raises(CorruptFileError, match=message):
        read_torch_bin(path)


def test_torch_before_2_6_refuses_bins(tmp_path, monkeypatch):
    path = tmp_path / "pytorch_model.bin"
    torch.save({"x": torch.zeros(1)}, path)
    monkeypatch.setattr(torch, "__version__", "2.5.1+cpu")
    with pytest.raises(UnsupportedModelError, match="CVE-2025-32434"):
        read_torch_bin(path)


# -- a head for another target ---------------------------------------------------------------

def _mismatched(kind: str, directory, embedding):
    tensors, _, _ = write_layout("eagle3-specforge" if kind.startswith("eagle3") else
                                 "eagle1-safetensors", directory, embedding)
    config = json.loads((directory / "config.json").read_text())
    if kind == "eagle1-hidden":
        config["hidden_size"] = 32
        message = "hidden_size 32"
    elif kind == "eagle1-vocab":
        config["vocab_size"] = 128
        message = "vocab_size 128"
    elif kind == "eagle3-layers":
        config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] = [1, 7, 12]
        message = r"feature layers \[1, 7, 12\].*6 layers"
    else:  # eagle3-features: a head trained on a target of hidden size 96
        tensors["fc.weight"] = torch.zeros(H, 3 * 96)
        save_file(tensors, str(directory / "model.safetensors"))
        config.pop("target_hidden_size")
        message = "target hidden size of 96"
    (directory / "config.json").write_text(json.dumps(config))
    return message


@pytest.mark.parametrize("kind", ["eagle1-hidden", "eagle1-vocab", "eagle3-layers",
                                  "eagle3-features"])
def test_a_head_for_another_target_is_refused_before_the_target_loads(kind, tmp_path,
                                                                      monkeypatch):
    """LLM(model=target, draft=head) refuses, naming both configs, without opening any of
    the target's weight files (a spy on every safetensors read sees none of them)."""
    import eagle_hal.model.loading.hf as hf
    import safetensors
    from eagle_hal.api import LLM

    _hf_target(tmp_path / "target")
    embedding = torch.zeros(VOCAB, H)
    message = _mismatched(kind, tmp_path / "head", embedding)
    opened = []
    for module, name in ((hf, "read_safetensors_header"), (hf, "iter_safetensors"),
                         (safetensors, "safe_open")):
        original = getattr(module, name)

        def spy(path, *args, _original=original, **kwargs):
            opened.append(path)
            return _original(path, *args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    with pytest.raises(HeadTargetMismatch, match=message) as caught:
        LLM(model=str(tmp_path / "target"), draft=str(tmp_path / "head"), device="cpu",
            progress=False, draft_vocab="full")
    text = str(caught.value)
    assert str(tmp_path / "head" / "config.json") in text
    assert str(tmp_path / "target" / "config.json") in text
    target_dir = str(tmp_path / "target")
    assert not [p for p in opened if str(p if not isinstance(p, list) else p[0])
                .startswith(target_dir)]
