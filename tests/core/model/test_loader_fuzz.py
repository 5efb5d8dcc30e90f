"""Fuzzing the loaders with damaged files: tiny valid GGUF files and safetensors
checkpoints are written, their headers mutated (byte flips, truncation, length and count
fields set huge, JSON headers that lie about shapes and offsets, config values of any
type), and loaded through the public entry points.

Each example must end in a ``ModelLoadError`` or a successful load, within the deadline,
and allocate no more than the file could fill. Allocation is measured, not inferred:
``tracemalloc`` sees Python and numpy memory, and a ``TorchDispatchMode`` adds up the
storage of every tensor an aten operation creates (torch's CPU allocator is invisible
to ``tracemalloc``). A loader that sized anything from a lying header before checking it
against the file would exceed these bounds by orders of magnitude.
"""

from __future__ import annotations

import json
import struct
import tracemalloc
from pathlib import Path

import pytest
import torch
from eagle_hal.model.errors import ModelLoadError
from eagle_hal.model.loading import load_eagle_head, load_target
from eagle_hal.model.loading.hf import load_hf_model
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

gguf = pytest.importorskip("gguf")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

V, H, HEADS, KV_HEADS, HEAD_DIM, FFN = 16, 8, 2, 1, 4, 16
FUZZ = settings(max_examples=60, deadline=2000, database=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# Every valid load below allocates its parameters once and reads each tensor once.
TORCH_SLACK = 64 * 1024
# Python-side bookkeeping of building a module and parsing metadata, whatever the file.
PYTHON_SLACK = 4 * 1024 * 1024


def llama_tensors(seed: int = 0) -> dict[str, torch.Tensor]:
    """A one-layer tied Llama of the tiny geometry, Hugging Face names."""
    generator = torch.Generator().manual_seed(seed)
    shapes = {
        "model.embed_tokens.weight": (V, H),
        "model.layers.0.input_layernorm.weight": (H,),
        "model.layers.0.self_attn.q_proj.weight": (HEADS * HEAD_DIM, H),
        "model.layers.0.self_attn.k_proj.weight": (KV_HEADS * HEAD_DIM, H),
        "model.layers.0.self_attn.v_proj.weight": (KV_HEADS * HEAD_DIM, H),
        "model.layers.0.self_attn.o_proj.weight": (H, HEADS * HEAD_DIM),
        "model.layers.0.post_attention_layernorm.weight": (H,),
        "model.layers.0.mlp.gate_proj.weight": (FFN, H),
        "model.layers.0.mlp.up_proj.weight": (FFN, H),
        "model.layers.0.mlp.down_proj.weight": (H, FFN),
        "model.norm.weight": (H,),
    }
    return {name: torch.randn(shape, generator=generator) * 0.1
            for name, shape in shapes.items()}


HF_CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": V,
    "hidden_size": H, "intermediate_size": FFN, "num_hidden_layers": 1,
    "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS, "head_dim": HEAD_DIM,
    "max_position_embeddings": 64, "tie_word_embeddings": True,
}

GGUF_NAMES = {"model.embed_tokens.weight": "token_embd.weight",
              "model.norm.weight": "output_norm.weight"}
GGUF_BLOCK = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
              "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
              "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
              "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
TOKENS = ["<eos>", "a", "b", "c", "d", "e", "f", "g", "h", "i", "j", "k", "l", "m", "ab", "Ġ"]


def write_gguf(path: Path) -> None:
    """A float32 llama GGUF of the tiny geometry with a byte-level BPE tokenizer."""
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(1)
    writer.add_context_length(64)
    writer.add_embedding_length(H)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_vocab_size(V)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_types([3] + [1] * (V - 1))
    writer.add_token_merges(["a b"])
    writer.add_eos_token_id(0)
    writer.add_chat_template("{{ messages[0]['content'] }}")
    for name, tensor in llama_tensors().items():
        if name in GGUF_NAMES:
            gguf_name = GGUF_NAMES[name]
        else:
            rest = name.removeprefix("model.layers.0.")
            gguf_name = f"blk.0.{GGUF_BLOCK[rest.removesuffix('.weight')]}.weight"
        writer.add_tensor(gguf_name, tensor.numpy().copy())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_hf(directory: Path) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    save_file(llama_tensors(), str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps(HF_CONFIG))


def write_eagle1(directory: Path) -> None:
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(1)
    tensors = {"fc.weight": torch.randn(H, 2 * H, generator=generator)}
    for name, tensor in llama_tensors(2).items():
        if name.startswith("model.layers.0.") and "input_layernorm" not in name:
            tensors[name.removeprefix("model.")] = tensor
    directory.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(directory / "model.safetensors"))
    (directory / "config.json").write_text(json.dumps({**HF_CONFIG, "bias": False}))


class TorchAllocations(TorchDispatchMode):
    """Adds up the storage bytes of every tensor an aten operation returns that is not
    one of its inputs' storage (views and in-place results are not new memory). Meta
    tensors take none. Freed tensors stay counted: the total bounds the peak."""

    def __init__(self) -> None:
        super().__init__()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                  if isinstance(t, torch.Tensor) and t.device.type != "meta"}
        for tensor in tree_leaves(out):
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                storage = tensor.untyped_storage()
                if storage.data_ptr() not in inputs:
                    inputs.add(storage.data_ptr())
                    self.bytes += storage.nbytes()
        return out


def load_measured(load, file_bytes: int) -> None:
    """Run ``load``: any exception but a ``ModelLoadError`` fails the example, and so
    does allocating more than ``file_bytes`` allow."""
    tracker = TorchAllocations()
    tracemalloc.start()
    try:
        with tracker:
            try:
                load()
            except ModelLoadError as error:
                assert str(error)
        _, python_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert tracker.bytes <= 2 * file_bytes + TORCH_SLACK, (
        f"torch allocated {tracker.bytes} bytes for a {file_bytes}-byte file")
    assert python_peak <= 2 * file_bytes + PYTHON_SLACK, (
        f"Python/numpy peaked at {python_peak} bytes for a {file_bytes}-byte file")


HUGE = st.sampled_from([2**64 - 1, 2**63, 2**62 + 3, 2**40, 2**32 + 1, 2**31, 2**16])


def mutations(header_end: int, size: int, count_fields: tuple[int, ...]):
    """Strategy: a list of edits to a file of ``size`` bytes whose header ends at
    ``header_end``: byte flips in the header, a u64 set huge (at a known length or count
    field, or anywhere in the header), or a truncation."""
    position = st.integers(0, header_end - 1)
    flip = st.tuples(st.just("flip"), position, st.integers(1, 255))
    field = st.sampled_from(count_fields) | st.integers(0, header_end - 8)
    huge = st.tuples(st.just("u64"), field, HUGE | st.integers(0, 2**64 - 1))
    cut = st.tuples(st.just("cut"), st.integers(0, size - 1), st.just(0))
    return st.lists(flip | huge | cut, min_size=1, max_size=4)


def mutate(data: bytes, edits) -> bytes:
    buffer = bytearray(data)
    for kind, where, value in edits:
        if kind == "cut":
            del buffer[min(where, len(buffer)):]
        elif kind == "flip" and where < len(buffer):
            buffer[where] ^= value
        elif kind == "u64" and where + 8 <= len(buffer):
            struct.pack_into("<Q", buffer, where, value)
    return bytes(buffer)


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("originals")
    write_gguf(root / "tiny.gguf")
    write_hf(root / "hf")
    write_eagle1(root / "head")
    target = load_hf_model(root / "hf", progress=False)
    # the unmutated files load, so every rejection below comes from a mutation
    load_target(root / "tiny.gguf", progress=False)
    load_eagle_head(root / "head", target)
    return root, target


def test_unmutated_files_fit_the_allocation_bounds(originals):
    """The bounds hold for valid loads, so they only fail on a loader's own excess."""
    root, target = originals
    gguf_path, st_path = root / "tiny.gguf", root / "hf" / "model.safetensors"
    load_measured(lambda: load_target(gguf_path, progress=False), gguf_path.stat().st_size)
    load_measured(lambda: load_hf_model(root / "hf", progress=False), st_path.stat().st_size)


def _gguf_layout(path: Path) -> int:
    return int(gguf.GGUFReader(str(path)).data_offset)


@FUZZ
@given(data=st.data())
def test_mutated_gguf_raises_only_model_load_error(originals, tmp_path_factory, data):
    root, _ = originals
    original = (root / "tiny.gguf").read_bytes()
    header_end = _gguf_layout(root / "tiny.gguf")
    edits = data.draw(mutations(header_end, len(original), (4, 8, 16, 24)))
    path = tmp_path_factory.mktemp("gguf") / "mutated.gguf"
    path.write_bytes(mutate(original, edits))
    load_measured(lambda: load_target(path, progress=False), max(len(original), 1))


def _header_end(data: bytes) -> int:
    return 8 + struct.unpack_from("<Q", data)[0]


@FUZZ
@given(data=st.data())
def test_mutated_safetensors_raises_only_model_load_error(originals, tmp_path_factory, data):
    root, _ = originals
    original = (root / "hf" / "model.safetensors").read_bytes()
    edits = data.draw(mutations(_header_end(original), len(original), (0,)))
    directory = tmp_path_factory.mktemp("hf")
    (directory / "config.json").write_text(json.dumps(HF_CONFIG))
    (directory / "model.safetensors").write_bytes(mutate(original, edits))
    load_measured(lambda: load_hf_model(directory, progress=False), len(original))


def _lying_header(original: bytes, draw) -> bytes:
    """``original`` with one tensor entry of its JSON header changed to lie about its
    dtype, shape or byte range; the length field is kept true to the new header."""
    header = json.loads(original[8:_header_end(original)])
    names = sorted(name for name in header if name != "__metadata__")
    entry = header[draw(st.sampled_from(names))]
    key = draw(st.sampled_from(["shape", "data_offsets", "dtype"]))
    lie = st.one_of(st.integers(-(2**70), 2**70), HUGE, st.text(max_size=4), st.none(),
                    st.booleans(), st.floats())
    if key == "dtype":
        entry["dtype"] = draw(st.sampled_from(["F16", "I64", "BOOL", "F4", "", "F64"]) | lie)
    elif draw(st.booleans()):
        entry[key] = draw(st.lists(lie, max_size=3))
    else:
        entry[key][draw(st.integers(0, len(entry[key]) - 1))] = draw(lie)
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + original[_header_end(original):]


@FUZZ
@given(data=st.data())
def test_lying_safetensors_header_raises_only_model_load_error(originals, tmp_path_factory,
                                                               data):
    root, target = originals
    source = data.draw(st.sampled_from(["hf", "head"]))
    original = (root / source / "model.safetensors").read_bytes()
    directory = tmp_path_factory.mktemp(source)
    config = json.loads((root / source / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps(config))
    (directory / "model.safetensors").write_bytes(_lying_header(original, data.draw))
    if source == "hf":
        load_measured(lambda: load_hf_model(directory, progress=False), len(original))
    else:
        load_measured(lambda: load_eagle_head(directory, target), len(original))


CONFIG_VALUES = st.one_of(
    st.integers(-(2**70), 2**70), HUGE, st.floats(), st.text(max_size=6), st.none(),
    st.booleans(), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


@FUZZ
@given(data=st.data())
def test_config_values_of_any_type_raise_only_model_load_error(originals, tmp_path_factory,
                                                               data):
    root, target = originals
    source = data.draw(st.sampled_from(["hf", "head"]))
    config = json.loads((root / source / "config.json").read_text())
    keys = sorted(config) + ["rope_scaling", "eos_token_id", "draft_vocab_size", "eagle_config"]
    for key in data.draw(st.lists(st.sampled_from(keys), min_size=1, max_size=3)):
        config[key] = data.draw(CONFIG_VALUES)
    directory = tmp_path_factory.mktemp(source)
    (directory / "config.json").write_text(json.dumps(config))
    weights = (root / source / "model.safetensors").read_bytes()
    (directory / "model.safetensors").write_bytes(weights)
    if source == "hf":
        load_measured(lambda: load_hf_model(directory, progress=False), len(weights))
    else:
        load_measured(lambda: load_eagle_head(directory, target), len(weights))
