"""Inference fusion never reaches training: validating a head through the engine fuses the
engine's copies only, and a saved head has the EAGLE-1 layout whether fused or not.

Oracles: the head's parameters before validation (names, values, requires_grad), autograd
(every head parameter gets a gradient after the engine ran), the target's features before
the engine fused it, and the checkpoint file written from an unfused head.
"""

from __future__ import annotations

import torch
from eagle_hal.model.loading.eagle_ckpt import load_eagle_head, save_eagle1
from eagle_hal.testing.models import tiny_target
from eagle_hal.train.dense import draft_forward, target_features
from eagle_hal.train.evaluate import copy_head, engine_accept_length
from eagle_hal.train.trainer import init_eagle1
from safetensors.torch import load_file


def test_engine_validation_leaves_the_trained_head_unfused_and_trainable(cpu_backend):
    """After engine_accept_length the head being trained is untouched and still trains; the
    (fused) target gives the same features as before."""
    target = tiny_target(seed=5)
    target.requires_grad_(False)
    head = init_eagle1(target, seed=0).train()
    generator = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, target.config.vocab_size, (2, 9), generator=generator)
    with torch.no_grad():
        features_before = target_features(target, tokens)
    names_before = {name: p.detach().clone() for name, p in head.named_parameters()}

    engine_accept_length(cpu_backend, target, head, [[3, 4, 5], [6, 7]], draft_steps=2,
                         max_new_tokens=4)

    assert target.model.layers[0].self_attn._qkv is not None  # the engine fused the target
    assert head.layers[0].self_attn._qkv is None and head.layers[0].mlp._gate_up is None
    for name, param in head.named_parameters():
        assert param.requires_grad and torch.equal(param.detach(), names_before[name]), name
    with torch.no_grad():
        torch.testing.assert_close(target_features(target, tokens), features_before,
                                   atol=1e-5, rtol=0)
    out = draft_forward(head, tokens, features_before)
    out.square().mean().backward()
    missing = [name for name, p in head.named_parameters() if p.grad is None]
    assert missing == []


def test_saved_head_layout_is_the_same_fused_or_not(tmp_path):
    """save_eagle1 writes fc.* and layers.0.* with equal tensors from a head and from its
    fused copy; the file loads back into a head with those weights."""
    target = tiny_target(seed=6)
    head = init_eagle1(target, seed=2)
    fused = copy_head(head, target, torch.float32)
    fused.fuse_for_inference()
    save_eagle1(head, tmp_path / "plain")
    save_eagle1(fused, tmp_path / "fused")
    plain_file = load_file(str(tmp_path / "plain" / "model.safetensors"))
    fused_file = load_file(str(tmp_path / "fused" / "model.safetensors"))
    assert sorted(plain_file) == sorted(fused_file)
    assert all(name.startswith(("fc.", "layers.0.")) for name in plain_file)
    assert "layers.0.self_attn.q_proj.weight" in plain_file
    for name, tensor in plain_file.items():
        assert torch.equal(fused_file[name], tensor), name
    loaded = load_eagle_head(tmp_path / "fused", target)
    for name, tensor in head.state_dict().items():
        assert torch.equal(loaded.state_dict()[name], tensor), name
