"""Each rank loads exactly its slice of every weight, straight from the checkpoint.

Oracle: the Hugging Face model's own state dict, sliced by hand (heads and MLP channels by
rows, o/down by columns, the vocabulary by rows with zero padding). No process group is
needed to load: contexts of each rank are built by hand and no collective runs.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.parallel import ParallelContext, ShardingError, shard_llama, sharded_llama
from eagle_hal.parallel.sharding import load_sharded_hf_model
from eagle_hal.testing.models import tiny_config, tiny_target

TINY = dict(vocab_size=61, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128)

ROW_SPLIT = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
COLUMN_SPLIT = ("o_proj", "down_proj")


def _context(rank: int, world: int) -> ParallelContext:
    return ParallelContext(rank=rank, world_size=world, group=object())


def _expected_slice(name: str, full: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    """The brute-force slice of checkpoint tensor ``name`` for ``rank``."""
    if "embed_tokens" in name or name == "lm_head.weight":
        rows = -(-full.shape[0] // world)
        padded = torch.zeros(rows * world, *full.shape[1:])
        padded[: full.shape[0]] = full
        return padded[rank * rows : (rank + 1) * rows]
    module = name.split(".")[-2]
    if module in ROW_SPLIT:
        return full.chunk(world, dim=0)[rank]
    if module in COLUMN_SPLIT and name.endswith("weight"):
        return full.chunk(world, dim=1)[rank]
    return full  # norms, o/down biases: replicated


def _save_hf(kind: str, directory, **overrides):
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
    }[kind]
    torch.manual_seed(0)
    model = model_class(config_class(**{**TINY, **overrides})).float().eval()
    with torch.no_grad():
        for param in model.parameters():
            param.normal_(0, 0.2)
    model.save_pretrained(directory, safe_serialization=True)
    return model


@pytest.mark.parametrize("kind,world,tied",
                         [("qwen2", 2, False), ("llama", 2, True), ("llama", 4, False)])
def test_each_rank_loads_its_slice_from_safetensors(tmp_path, kind, world, tied):
    """Every parameter of every rank equals the hand-made slice of the HF tensor (biased
    Q/K/V split with their rows; tied lm_head is the embedding shard; odd vocabulary)."""
    overrides = {"tie_word_embeddings": tied}
    if world == 4:
        overrides.update(num_key_value_heads=4)
    hf = _save_hf(kind, tmp_path / kind, **overrides)
    full = hf.state_dict()
    for rank in range(world):
        model = load_sharded_hf_model(tmp_path / kind, _context(rank, world))
        params = dict(model.named_parameters(remove_duplicate=False))
        assert params["lm_head.weight"] is params["model.embed_tokens.weight"] or not tied
        for name, param in params.items():
            source = (full["model.embed_tokens.weight"] if tied and name == "lm_head.weight"
                      else full[name])
            assert torch.equal(param.detach(), _expected_slice(name, source, rank, world)), name
        attention = model.model.layers[0].self_attn
        assert (attention.num_heads, attention.num_kv_heads) == (
            4 // world, overrides.get("num_key_value_heads", 2) // world
        )


def test_shard_llama_splits_a_built_model_like_the_loader():
    """Sharding an in-memory model gives each rank the same slices as loading would."""
    target = tiny_target(seed=3, vocab=61)
    full = target.state_dict()
    for rank in range(2):
        sharded = shard_llama(target, _context(rank, 2))
        assert sharded.parallel.rank == rank
        for name, param in sharded.named_parameters():
            assert torch.equal(param.detach(), _expected_slice(name, full[name], rank, 2)), name


@pytest.mark.parametrize("world,what", [(4, "key/value heads"), (3, "attention heads")])
def test_a_model_that_does_not_split_is_refused(world, what):
    """Heads or KV heads not divisible by the world size: ShardingError naming the count."""
    with pytest.raises(ShardingError, match=what):
        sharded_llama(tiny_config(vocab=61), _context(0, world))


def test_a_single_rank_is_the_whole_model():
    """With one rank the sharded model's weights are the model's own."""
    target = tiny_target(seed=4, vocab=61)
    sharded = shard_llama(target, ParallelContext.single())
    for (name, a), (_, b) in zip(target.state_dict().items(), sharded.state_dict().items(),
                                 strict=True):
        assert torch.equal(a, b), name
