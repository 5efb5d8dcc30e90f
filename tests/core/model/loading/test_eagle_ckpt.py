"""EAGLE head directories: variant detection from published tensor names, the embedding
policy, EAGLE-3 layer ids from config, the EAGLE-1 and EAGLE-3 writers, and the loading errors."""

from __future__ import annotations

import json

import pytest
import torch
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.eagle import Eagle1DraftModel, Eagle3DraftModel
from eagle_hal.model.errors import (
    MissingTensorsError,
    ModelFileNotFound,
    TensorShapeMismatch,
    UnsupportedModelError,
)
from eagle_hal.model.loading.eagle_ckpt import (
    EagleVariant,
    HeadTargetMismatch,
    detect_eagle_variant,
    load_eagle_head,
    save_eagle1,
    save_eagle3,
)
from eagle_hal.model.loading.hf import load_hf_model
from safetensors.torch import load_file, save_file


@pytest.fixture
def target(hf_tiny):
    _, directory = hf_tiny("llama", seed=3, num_hidden_layers=6)
    return load_hf_model(directory)


@pytest.mark.parametrize(
    ("names", "variant"),
    [
        ({"fc.weight", "fc.bias", "layers.0.self_attn.q_proj.weight"}, EagleVariant.EAGLE1),
        ({"fc.weight", "midlayer.hidden_norm.weight", "d2t", "t2d"}, EagleVariant.EAGLE3),
        ({"fc.weight", "layers.0.hidden_norm.weight", "lm_head.weight"}, EagleVariant.EAGLE3),
    ],
)
def test_variant_detection(names, variant):
    """Published tensor names identify the head variant."""
    assert detect_eagle_variant(names) is variant


def test_unknown_layout_is_rejected():
    """A checkpoint that is neither layout raises UnsupportedModelError."""
    with pytest.raises(UnsupportedModelError, match="not an EAGLE head"):
        detect_eagle_variant({"model.embed_tokens.weight", "lm_head.weight"})


def test_eagle3_default_and_configured_aux_layers(target, tmp_path, eagle_ckpt):
    """Default feature layers are (2, L//2, L-3); eagle_aux_hidden_state_layer_ids (layer
    outputs) shift by one to the residual stream entering the next layer."""
    eagle_ckpt.write_eagle3(tmp_path / "default")
    head = load_eagle_head(tmp_path / "default", target)
    assert isinstance(head, Eagle3DraftModel) and head.aux_layers == (2, 3, 3)
    eagle_ckpt.write_eagle3(tmp_path / "custom",
                            eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4]})
    assert load_eagle_head(tmp_path / "custom", target).aux_layers == (1, 3, 5)


def test_eagle3_under_decoder_layer_names_loads(target, tmp_path, eagle_ckpt):
    """An EAGLE-3 head saved with layers.0.* instead of midlayer.* loads the same weights."""
    tensors, _ = eagle_ckpt.write_eagle3(tmp_path / "midlayer")
    renamed = tmp_path / "layers0"
    renamed.mkdir()
    save_file({k.replace("midlayer.", "layers.0."): v for k, v in tensors.items()},
              str(renamed / "model.safetensors"))
    (renamed / "config.json").write_text((tmp_path / "midlayer" / "config.json").read_text())
    head = load_eagle_head(renamed, target)
    assert torch.equal(head.midlayer.hidden_norm.weight, tensors["midlayer.hidden_norm.weight"])


def test_full_vocab_eagle3_may_omit_id_maps(target, tmp_path, eagle_ckpt):
    """Without d2t/t2d and with the full vocabulary, draft ids are target ids; with a reduced
    vocabulary the maps are required."""
    tensors, _ = eagle_ckpt.write_eagle3(tmp_path / "reduced")
    del tensors["d2t"], tensors["t2d"]
    save_file(tensors, str(tmp_path / "reduced" / "model.safetensors"))
    with pytest.raises(MissingTensorsError, match="d2t"):
        load_eagle_head(tmp_path / "reduced", target)

    full = dict(tensors, **{"lm_head.weight": torch.randn(97, 64) * 0.05})
    (tmp_path / "full").mkdir()
    save_file(full, str(tmp_path / "full" / "model.safetensors"))
    config = json.loads((tmp_path / "reduced" / "config.json").read_text())
    config["draft_vocab_size"] = 97
    (tmp_path / "full" / "config.json").write_text(json.dumps(config))
    head = load_eagle_head(tmp_path / "full", target)
    hidden = torch.randn(3, 64)
    with torch.no_grad():
        logits = head.compute_logits(hidden)
        expected = head.lm_head(head.norm(hidden)).float()
    torch.testing.assert_close(logits, expected)


def test_checkpoint_embedding_policy(target, tmp_path, eagle_ckpt):
    """A checkpoint embedding equal to the target's is shared; a different one is used."""
    same = target.model.embed_tokens.weight.detach()
    eagle_ckpt.write_eagle1(tmp_path / "same", embed=same)
    assert load_eagle_head(tmp_path / "same", target).embed_tokens is target.model.embed_tokens
    other = torch.randn_like(same)
    eagle_ckpt.write_eagle1(tmp_path / "other", embed=other)
    head = load_eagle_head(tmp_path / "other", target)
    assert torch.equal(head.embed_tokens(torch.tensor([5])), other[5:6])


def test_save_eagle1_writes_the_published_layout(target, tmp_path, eagle_ckpt, runtime_for):
    """save_eagle1 writes config.json + model.safetensors with the published names; loading
    it back gives the same tensors and the same draft step."""
    tensors = eagle_ckpt.write_eagle1(tmp_path / "original")
    head = load_eagle_head(tmp_path / "original", target)
    assert isinstance(head, Eagle1DraftModel)
    save_eagle1(head, tmp_path / "saved")
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert saved.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert torch.equal(saved[name], tensor), name
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert (config["num_hidden_layers"], config["hidden_size"], config["bias"]) == (1, 64, True)
    assert config["architectures"] == ["LlamaForCausalLM"]

    reloaded = load_eagle_head(tmp_path / "saved", target)
    outputs = []
    for model in (head, reloaded):
        runtime = runtime_for(model.config)
        batch = runtime.causal_batch([runtime.new_request()], [[4, 8, 15]],
                                     mode=ForwardMode.DRAFT_EXTEND)
        with torch.no_grad():
            outputs.append(model(batch, runtime.backend, None, torch.randn(
                3, 64, generator=torch.Generator().manual_seed(0))))
    assert torch.equal(outputs[0], outputs[1])


def test_save_eagle3_writes_the_published_layout(target, tmp_path, eagle_ckpt, runtime_for):
    """save_eagle3 writes the SpecForge names and config fields (oracle: the SpecForge-style
    writer); loading it back gives the same tensors, feature layers, id maps and draft step."""
    tensors, _ = eagle_ckpt.write_eagle3(
        tmp_path / "original", eagle_config={"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    )
    head = load_eagle_head(tmp_path / "original", target)
    save_eagle3(head, tmp_path / "saved")
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert saved.keys() == tensors.keys()
    for name, tensor in tensors.items():
        assert torch.equal(saved[name], tensor), name
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLMEagle3"]
    assert config["eagle_config"] == {"eagle_aux_hidden_state_layer_ids": [0, 2, 4]}
    assert (config["draft_vocab_size"], config["target_hidden_size"]) == (head.draft_vocab_size, 64)
    assert (config["num_hidden_layers"], config["norm_before_residual"]) == (1, False)

    reloaded = load_eagle_head(tmp_path / "saved", target)
    assert isinstance(reloaded, Eagle3DraftModel) and reloaded.aux_layers == (1, 3, 5)
    outputs = []
    for model in (head, reloaded):
        runtime = runtime_for(model.config)
        batch = runtime.causal_batch([runtime.new_request()], [[4, 8, 15]],
                                     mode=ForwardMode.DRAFT_EXTEND)
        with torch.no_grad():
            out = model(batch, runtime.backend, None, torch.randn(
                3, 64, generator=torch.Generator().manual_seed(0)))
            outputs.append((out, *model.topk(out, 3)))
    for first, second in zip(*outputs, strict=True):
        assert torch.equal(first, second)


def test_save_eagle3_refuses_the_embedding_stream(target, tmp_path, eagle_ckpt):
    """A head reading the embeddings (stream 0) cannot be named by the published ids."""
    eagle_ckpt.write_eagle3(tmp_path / "original")
    head = load_eagle_head(tmp_path / "original", target)
    head.aux_layers = (0, 3, 5)
    with pytest.raises(UnsupportedModelError, match="embeddings"):
        save_eagle3(head, tmp_path / "saved")
    with pytest.raises(TypeError, match="EAGLE-3"):
        save_eagle3(object(), tmp_path / "saved")


def test_head_loading_errors(target, tmp_path, eagle_ckpt):
    """Missing directory, wrong shapes (named), wrong-vocab embedding (a head for another
    target, refused naming the tensor and both geometries): specific errors."""
    with pytest.raises(ModelFileNotFound):
        load_eagle_head(tmp_path / "absent", target)
    tensors = eagle_ckpt.write_eagle1(tmp_path / "bad")
    tensors["layers.0.mlp.up_proj.weight"] = torch.zeros(95, 64)
    save_file(tensors, str(tmp_path / "bad" / "model.safetensors"))
    with pytest.raises(TensorShapeMismatch, match=r"layers\.0\.mlp\.up_proj\.weight"):
        load_eagle_head(tmp_path / "bad", target)
    eagle_ckpt.write_eagle1(tmp_path / "vocab", embed=torch.zeros(50, 64))
    with pytest.raises(HeadTargetMismatch, match=r"embed_tokens.weight of shape \[50, 64\].*"
                       r"\[97, 64\]"):
        load_eagle_head(tmp_path / "vocab", target)


def test_stacked_eagle1_round_trip_and_layer_count(target, tmp_path, eagle_ckpt):
    """A two-layer EAGLE-1 head with 40-wide MLPs loads with two layers; save_eagle1 writes
    the same tensors and a config with num_hidden_layers 2 and intermediate_size 40. The
    tensors decide the layer count: a config that says otherwise is reported with a
    warning, and a gap in the layer indices is a missing-tensors error."""
    tensors = eagle_ckpt.write_eagle1(tmp_path / "stacked", layers=2, ffn=40)
    head = load_eagle_head(tmp_path / "stacked", target)
    assert head.config.num_layers == 2 and head.config.intermediate_size == 40
    save_eagle1(head, tmp_path / "saved")
    saved = load_file(str(tmp_path / "saved" / "model.safetensors"))
    assert saved.keys() == tensors.keys()
    assert all(torch.equal(saved[name], tensor) for name, tensor in tensors.items())
    config = json.loads((tmp_path / "saved" / "config.json").read_text())
    assert (config["num_hidden_layers"], config["intermediate_size"]) == (2, 40)

    config["num_hidden_layers"] = 30  # e.g. an export that copied the target's config
    (tmp_path / "saved" / "config.json").write_text(json.dumps(config))
    with pytest.warns(UserWarning, match=r"num_hidden_layers = 30.*hold 2 layer"):
        assert load_eagle_head(tmp_path / "saved", target).config.num_layers == 2

    gap = {name: t for name, t in tensors.items() if not name.startswith("layers.1.")}
    gap.update({name.replace("layers.1.", "layers.2."): t
                for name, t in tensors.items() if name.startswith("layers.1.")})
    save_file(gap, str(tmp_path / "stacked" / "model.safetensors"))
    with pytest.warns(UserWarning), pytest.raises(MissingTensorsError, match=r"layers\.1\."):
        load_eagle_head(tmp_path / "stacked", target)
