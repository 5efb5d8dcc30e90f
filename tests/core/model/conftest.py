"""Shared fixtures for the model tests: a paged KV runtime that drives a model through the
reference attention backend, and tiny random Hugging Face checkpoints."""

from __future__ import annotations

import json
import math
import random
import types

import pytest
import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, PageAllocator, RequestTokenTable
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.attention_reference import TorchAttentionBackend
from safetensors.torch import save_file


class PagedRuntime:
    """Paged KV storage (pages handed out in shuffled order) plus the reference backend,
    for one model geometry; builds ForwardBatches the way the engine will."""

    def __init__(self, *, num_layers: int, num_heads: int, num_kv_heads: int, head_dim: int,
                 page_size: int = 16, max_requests: int = 4, max_context: int = 256,
                 dtype: torch.dtype = torch.float32, tree_mask_mode: str = "tree_block",
                 seed: int = 0, layer_windows: tuple[int | None, ...] = (),
                 logit_softcap: float | None = None) -> None:
        layout = KVLayout(page_size=page_size)
        num_pages = max_requests * -(-max_context // page_size) + 2
        self.allocator = PageAllocator(num_pages, page_size)
        pages = self.allocator.allocate(self.allocator.num_free_pages)
        random.Random(seed).shuffle(pages)
        self.allocator.free(pages)
        self.table = RequestTokenTable(self.allocator, max_requests, max_context)
        self.store = KVStorage.for_allocator(self.allocator, num_layers=num_layers,
                                             num_kv_heads=num_kv_heads, head_dim=head_dim,
                                             layout=layout, dtype=dtype, device="cpu")
        self.device_table = DeviceTokenTable(self.table, layout, "cpu")
        self.config = AttentionConfig(num_heads, num_kv_heads, head_dim, num_layers,
                                      1.0 / math.sqrt(head_dim), self.store,
                                      self.device_table.tensor, layer_windows=layer_windows,
                                      logit_softcap=logit_softcap)
        self.backend = TorchAttentionBackend(self.config, tree_mask_mode=tree_mask_mode)

    @classmethod
    def for_model(cls, config, **kwargs) -> PagedRuntime:
        return cls(num_layers=config.num_layers, num_heads=config.num_heads,
                   num_kv_heads=config.num_kv_heads, head_dim=config.head_dim,
                   layer_windows=config.layer_windows or (),
                   logit_softcap=config.attn_logit_softcap, **kwargs)

    def new_request(self) -> int:
        return self.table.add_request()

    def causal_batch(self, rows: list[int], tokens: list[list[int]],
                     mode: ForwardMode = ForwardMode.EXTEND) -> ForwardBatch:
        """Append ``tokens[i]`` to request ``rows[i]`` (reserving slots) and describe it."""
        prefix_lens, slots, positions = [], [], []
        for row, new in zip(rows, tokens, strict=True):
            prefix = self.table.length(row)
            self.table.reserve(row, prefix + len(new))
            prefix_lens.append(prefix)
            slots += self.table.slots(row, prefix, prefix + len(new))
            positions += range(prefix, prefix + len(new))
        self.device_table.sync()
        flat = [t for new in tokens for t in new]
        extend_lens = [len(new) for new in tokens]
        return ForwardBatch(
            mode=mode,
            input_ids=torch.tensor(flat, dtype=torch.int64),
            positions=torch.tensor(positions, dtype=torch.int64),
            table_rows=torch.tensor(rows, dtype=torch.int64),
            prefix_lens=torch.tensor(prefix_lens, dtype=torch.int64),
            extend_lens=torch.tensor(extend_lens, dtype=torch.int64),
            out_cache_loc=torch.tensor(slots, dtype=torch.int64),
            prefix_lens_cpu=tuple(prefix_lens),
            extend_lens_cpu=tuple(extend_lens),
        )


def randomize_(module: torch.nn.Module, seed: int, scale: float = 0.05) -> None:
    """Give every parameter (norm weights and biases included) random values."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in module.named_parameters():
            noise = torch.randn(param.shape, generator=generator) * scale
            if name.endswith("norm.weight"):
                param.copy_(1.0 + noise)
            else:
                param.copy_(noise * 4 if "embed" in name else noise)


TINY = dict(vocab_size=97, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)


def save_tiny_hf(kind: str, directory, seed: int = 0, **overrides):
    """Build a tiny random HF ``LlamaForCausalLM`` / ``Qwen2ForCausalLM`` /
    ``MistralForCausalLM``, save it as safetensors into ``directory``; return the HF model."""
    import transformers

    config_class, model_class = {
        "llama": (transformers.LlamaConfig, transformers.LlamaForCausalLM),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM),
        "mistral": (transformers.MistralConfig, transformers.MistralForCausalLM),
    }[kind]
    torch.manual_seed(seed)
    hf_config = config_class(**{**TINY, **overrides})
    model = model_class(hf_config).float().eval()
    randomize_(model, seed)
    model.save_pretrained(directory, safe_serialization=True)
    return model


@pytest.fixture
def hf_tiny(tmp_path):
    """Factory: ``hf_tiny(kind, **config_overrides) -> (hf_model, directory)``."""
    counter = iter(range(100))

    def make(kind: str = "llama", seed: int = 0, **overrides):
        directory = tmp_path / f"{kind}-{next(counter)}"
        return save_tiny_hf(kind, directory, seed=seed, **overrides), directory

    return make


@pytest.fixture
def save_hf():
    """``save_tiny_hf(kind, directory, seed=0, **overrides) -> hf_model``: a tiny random HF
    checkpoint written into a directory of the caller's choice."""
    return save_tiny_hf


@pytest.fixture
def runtime_for():
    """Factory: ``runtime_for(model_config, **kwargs) -> PagedRuntime``."""
    return PagedRuntime.for_model


@pytest.fixture
def new_runtime():
    """The ``PagedRuntime`` class, for geometries that are not a ``ModelConfig``."""
    return PagedRuntime


# -- EAGLE head checkpoints in the published layouts, for the TINY target geometry ---------

H, HEADS, KV_HEADS, HEAD_DIM, FFN, VOCAB, DRAFT_VOCAB = 64, 4, 2, 16, 96, 97, 40
EPS, THETA = 1e-6, 10000.0


def random_tensors(shapes: dict[str, tuple[int, ...]], seed: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in shapes.items():
        noise = torch.randn(shape, generator=generator)
        out[name] = 1.0 + 0.1 * noise if name.endswith("norm.weight") else 0.08 * noise
    return out


def layer_shapes(prefix: str, attention_input: int, ffn: int = FFN) -> dict[str, tuple[int, ...]]:
    return {
        f"{prefix}.self_attn.q_proj.weight": (HEADS * HEAD_DIM, attention_input),
        f"{prefix}.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, attention_input),
        f"{prefix}.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, attention_input),
        f"{prefix}.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        f"{prefix}.post_attention_layernorm.weight": (H,),
        f"{prefix}.mlp.gate_proj.weight": (ffn, H),
        f"{prefix}.mlp.up_proj.weight": (ffn, H),
        f"{prefix}.mlp.down_proj.weight": (H, ffn),
    }


def head_config(**extra) -> dict:
    return {"model_type": "llama", "hidden_size": H, "intermediate_size": FFN,
            "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "num_hidden_layers": 1, "rms_norm_eps": EPS, "rope_theta": THETA,
            "max_position_embeddings": 256, "vocab_size": VOCAB, "hidden_act": "silu", **extra}


def write_eagle1(directory, seed: int = 11, embed: torch.Tensor | None = None, layers: int = 1,
                 ffn: int = FFN):
    """A SafeAILab-style EAGLE-1 head directory with random weights: ``layers`` decoder
    layers (those after the first with an ``input_layernorm``), MLPs ``ffn`` wide."""
    shapes = {"fc.weight": (H, 2 * H), "fc.bias": (H,), **layer_shapes("layers.0", H, ffn)}
    for i in range(1, layers):
        shapes.update(layer_shapes(f"layers.{i}", H, ffn))
        shapes[f"layers.{i}.input_layernorm.weight"] = (H,)
    tensors = random_tensors(shapes, seed)
    if embed is not None:
        tensors["embed_tokens.weight"] = embed.clone()
    directory.mkdir(parents=True)
    save_file(tensors, str(directory / "model.safetensors"))
    config = head_config(architectures=["LlamaForCausalLM"], bias=True,
                         num_hidden_layers=layers, intermediate_size=ffn)
    (directory / "config.json").write_text(json.dumps(config))
    return tensors


def write_eagle3(directory, seed: int = 12, **config_extra):
    """A SpecForge-style EAGLE-3 head directory; the draft vocabulary is a random subset."""
    shapes = {"fc.weight": (H, 3 * H), "midlayer.input_layernorm.weight": (H,),
              "midlayer.hidden_norm.weight": (H,), **layer_shapes("midlayer", 2 * H),
              "norm.weight": (H,), "lm_head.weight": (DRAFT_VOCAB, H)}
    tensors = random_tensors(shapes, seed)
    subset = sorted(random.Random(seed).sample(range(VOCAB), DRAFT_VOCAB))
    tensors["d2t"] = torch.tensor(subset) - torch.arange(DRAFT_VOCAB)
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[subset] = True
    tensors["t2d"] = t2d
    directory.mkdir(parents=True)
    save_file(tensors, str(directory / "model.safetensors"))
    config = head_config(architectures=["LlamaForCausalLMEagle3"], draft_vocab_size=DRAFT_VOCAB,
                         **config_extra)
    (directory / "config.json").write_text(json.dumps(config))
    return tensors, subset


@pytest.fixture
def eagle_ckpt():
    """Writers of published-layout EAGLE head directories with random weights:
    ``write_eagle1(dir, seed=, embed=, layers=, ffn=) -> tensors`` (SafeAILab EAGLE-1) and
    ``write_eagle3(dir, seed=, **config) -> (tensors, draft_vocab_target_ids)`` (SpecForge)."""
    return types.SimpleNamespace(write_eagle1=write_eagle1, write_eagle3=write_eagle3,
                                 layer_shapes=layer_shapes, head_config=head_config)
