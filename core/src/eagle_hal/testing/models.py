"""Tiny random Llama targets and EAGLE-1 heads, in float32 on the CPU (or any device).

``tiny_target`` / ``tiny_eagle1`` are random: a random head is accepted about as often as
chance allows. ``near_bigram_target`` / ``matching_eagle1`` are built so that the head
guesses the target's greedy choice almost always, which exercises long accepted paths,
while the target still depends on its context through attention.
"""

from __future__ import annotations

import dataclasses

import torch

from eagle_hal.model.config import ModelConfig
from eagle_hal.model.eagle import Eagle1DraftModel
from eagle_hal.model.llama import LlamaForCausalLM

__all__ = [
    "hf_float64_copy",
    "matching_eagle1",
    "near_bigram_target",
    "randomize",
    "tiny_config",
    "tiny_eagle1",
    "tiny_target",
]


def tiny_config(vocab: int = 97, layers: int = 2, eos: tuple[int, ...] = ()) -> ModelConfig:
    return ModelConfig(
        architecture="llama", vocab_size=vocab, hidden_size=32, intermediate_size=64,
        num_layers=layers, num_heads=4, num_kv_heads=2, head_dim=8,
        max_position_embeddings=1024, eos_token_ids=eos,
    )


def randomize(module: torch.nn.Module, seed: int, scale: float = 0.3) -> None:
    """Deterministic random weights; norms near 1 so activations stay lively."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in sorted(module.named_parameters()):
            if "norm" in name:
                param.copy_(1.0 + 0.1 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(scale * torch.randn(param.shape, generator=gen))


def tiny_target(
    seed: int = 0,
    vocab: int = 97,
    layers: int = 2,
    eos: tuple[int, ...] = (),
    device: str | torch.device = "cpu",
) -> LlamaForCausalLM:
    model = LlamaForCausalLM(tiny_config(vocab, layers, eos), dtype=torch.float32, device=device)
    randomize(model, seed, scale=0.5)
    return model


def tiny_eagle1(
    target: LlamaForCausalLM, seed: int = 1, layers: int = 1, intermediate_size: int = 64
) -> Eagle1DraftModel:
    """A random EAGLE-1 head for a ``tiny_target``: ``layers`` > 1 stacks pre-norm layers
    after the first (each its own draft KV layer), MLPs ``intermediate_size`` wide."""
    config = dataclasses.replace(
        tiny_config(target.config.vocab_size, layers=layers), intermediate_size=intermediate_size
    )
    head = Eagle1DraftModel(config, target, fc_bias=True, dtype=torch.float32)
    randomize(head, seed)
    return head




def near_bigram_target(
    seed: int = 0, vocab: int = 61, attention_scale: float = 0.02, eos: tuple[int, ...] = (),
    device: str | torch.device = "cpu",
) -> LlamaForCausalLM:
    """A target whose next token depends mostly on the current one (so a draft can guess
    it) and slightly on the context through attention (so KV bookkeeping still matters)."""
    model = tiny_target(seed, vocab, eos=eos, device=device)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(attention_scale)
            layer.mlp.down_proj.weight.zero_()
        model.model.norm.weight.fill_(1.0)  # keeps argmax(lm_head(norm(x))) = argmax(lm_head(x))
    return model


def matching_eagle1(
    target: LlamaForCausalLM, noise: float = 0.0, seed: int = 3
) -> Eagle1DraftModel:
    """An EAGLE-1 head that passes the token embedding straight to the target's lm_head:
    with ``noise == 0`` it predicts a near-bigram target's greedy choice almost always."""
    head = tiny_eagle1(target, seed)
    hidden = target.config.hidden_size
    with torch.no_grad():
        head.fc.weight.zero_()
        head.fc.weight[:, :hidden] = torch.eye(hidden, device=head.fc.weight.device)
        head.fc.bias.zero_()
        layer = head.layers[0]
        layer.self_attn.o_proj.weight.zero_()
        layer.mlp.down_proj.weight.zero_()
        if noise:
            gen = torch.Generator().manual_seed(seed)
            head.fc.weight.add_(
                noise * torch.randn(head.fc.weight.shape, generator=gen).to(head.fc.weight.device)
            )
    return head


def hf_float64_copy(target: LlamaForCausalLM) -> torch.nn.Module:
    """``target`` (a Llama-family model of this package) as a float64 transformers
    ``LlamaForCausalLM`` holding the same weights: the independent oracle of the sampling
    tests. Needs transformers."""
    import transformers

    c = target.config
    config = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta, max_position_embeddings=c.max_position_embeddings,
        tie_word_embeddings=False, attention_bias=False,
    )
    model = transformers.LlamaForCausalLM(config).double().eval()
    state = {k: v.double() for k, v in target.state_dict().items()}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all("rotary" in k for k in missing), (missing, unexpected)
    return model
