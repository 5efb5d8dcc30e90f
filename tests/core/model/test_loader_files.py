"""Bad files met by each loader: missing, empty, truncated, garbage, not UTF-8, a shard
the index does not account for, config values of the wrong type. Each raises its typed
``ModelLoadError`` with a message naming the file."""

from __future__ import annotations

import json
import struct

import pytest
from eagle_hal.model.errors import (
    CorruptFileError,
    InvalidConfigError,
    MissingTensorsError,
    ModelFileNotFound,
    TensorShapeMismatch,
)
from eagle_hal.model.loading import Tokenizer, load_eagle_head, load_target
from eagle_hal.model.loading.gguf import gguf_reader, load_gguf_model
from eagle_hal.model.loading.hf import load_hf_model

gguf = pytest.importorskip("gguf")


def write_gguf(path, block_count: int = 1) -> None:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(block_count)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_head_count(2)
    writer.add_vocab_size(4)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b", "c", "ab"])
    import numpy as np

    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture
def hf_dir(hf_tiny):
    _, directory = hf_tiny("llama")
    return directory


@pytest.fixture
def head_dir(tmp_path, eagle_ckpt):
    eagle_ckpt.write_eagle1(tmp_path / "head")
    return tmp_path / "head"


# -- GGUF --------------------------------------------------------------------------------

@pytest.mark.parametrize("case", ["empty", "truncated", "garbage", "huge_count", "bad_key"])
def test_bad_gguf_is_a_corrupt_file_naming_it(tmp_path, case):
    path = tmp_path / "model.gguf"
    write_gguf(path)
    data = bytearray(path.read_bytes())
    if case == "empty":
        data = bytearray()
    elif case == "truncated":
        data = data[: len(data) // 2]
    elif case == "garbage":
        data = bytearray(b"\x9c" * 300)
    elif case == "huge_count":
        struct.pack_into("<Q", data, 16, 2**63)  # metadata entry count
    else:
        data[32] = 0xFF  # first byte of the first key: not UTF-8
    path.write_bytes(bytes(data))
    for load in (load_gguf_model, load_target, gguf_reader):
        with pytest.raises(CorruptFileError, match="model.gguf"):
            load(path)


def test_missing_gguf_is_model_file_not_found(tmp_path):
    with pytest.raises(ModelFileNotFound, match="absent.gguf"):
        load_gguf_model(tmp_path / "absent.gguf")


def test_gguf_metadata_of_the_wrong_type(tmp_path):
    """A head count stored as a string, and a model claiming more layers than it holds."""
    path = tmp_path / "typed.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_block_count(1)
    writer.add_embedding_length(8)
    writer.add_feed_forward_length(16)
    writer.add_string("llama.attention.head_count", "two")
    writer.add_vocab_size(4)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(InvalidConfigError, match=r"typed\.gguf.*head_count must be an integer"):
        load_gguf_model(path)
    write_gguf(tmp_path / "layers.gguf", block_count=1000)
    with pytest.raises(InvalidConfigError, match=r"layers\.gguf.*1000 layers"):
        load_gguf_model(tmp_path / "layers.gguf")


def test_gguf_tokenizer_metadata_of_the_wrong_type(tmp_path):
    path = tmp_path / "tok.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list(["a", "b"])
    writer.add_eos_token_id(7)  # past the vocabulary
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(InvalidConfigError, match=r"tok\.gguf.*eos_token_id"):
        Tokenizer.from_gguf(gguf_reader(path))


# -- safetensors -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("empty", "too short"),
        ("truncated", "claims bytes"),
        ("garbage", "not UTF-8"),
        ("huge_length", "header length field says"),
        ("not_json", "not valid JSON"),
    ],
)
def test_bad_safetensors_is_a_corrupt_file_naming_it(hf_dir, case, message):
    path = hf_dir / "model.safetensors"
    data = path.read_bytes()
    if case == "empty":
        data = b""
    elif case == "truncated":
        data = data[: len(data) - 100]
    elif case == "garbage":
        data = struct.pack("<Q", 16) + b"\xff" * 64
    elif case == "huge_length":
        data = struct.pack("<Q", 2**62) + data[8:]
    else:
        data = struct.pack("<Q", 4) + b"{{{{" + data[12:]
    path.write_bytes(data)
    with pytest.raises(CorruptFileError, match=message) as error:
        load_hf_model(hf_dir)
    assert str(path) in str(error.value)


def _rewrite_header(path, edit) -> None:
    data = path.read_bytes()
    length = struct.unpack_from("<Q", data)[0]
    header = json.loads(data[8 : 8 + length])
    edit(header)
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + length :])


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda e: e.__setitem__("data_offsets", [0, 2**40]), "claims bytes"),
        (lambda e: e.__setitem__("shape", [2**20, 2**20]), "needs 4398046511104 bytes"),
        (lambda e: e.__setitem__("shape", [-3]), "not a list of non-negative"),
        (lambda e: e.__setitem__("dtype", "Q9"), "unknown dtype"),
    ],
)
def test_safetensors_header_lying_about_sizes(hf_dir, edit, message):
    path = hf_dir / "model.safetensors"
    _rewrite_header(path, lambda header: edit(header["model.norm.weight"]))
    with pytest.raises(CorruptFileError, match=message) as error:
        load_hf_model(hf_dir)
    assert str(path) in str(error.value)


def test_index_naming_a_tensor_its_shard_lacks(hf_dir):
    index = hf_dir / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "model.safetensors",
                                                "model.extra.weight": "model.safetensors"}}))
    with pytest.raises(CorruptFileError, match="places tensor 'model.extra.weight'") as error:
        load_hf_model(hf_dir)
    assert str(index) in str(error.value)
    index.write_text(json.dumps({"metadata": {}}))
    with pytest.raises(CorruptFileError, match="weight_map"):
        load_hf_model(hf_dir)
    index.write_text(json.dumps({"weight_map": {"model.norm.weight": "shard-2.safetensors"}}))
    with pytest.raises(ModelFileNotFound, match="shard-2.safetensors"):
        load_hf_model(hf_dir)


# -- config.json -------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("contents", "error_type", "message"),
    [
        (b"", CorruptFileError, "is empty"),
        (b'{"hidden_size": "\xff"}', CorruptFileError, "not UTF-8"),
        (b"{not json", CorruptFileError, "not valid JSON"),
        (b"[1, 2]", CorruptFileError, "must hold a JSON object"),
    ],
)
def test_unreadable_config_json(hf_dir, contents, error_type, message):
    (hf_dir / "config.json").write_bytes(contents)
    with pytest.raises(error_type, match=message) as error:
        load_hf_model(hf_dir)
    assert str(hf_dir / "config.json") in str(error.value)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"hidden_size": "abc"}, "hidden_size must be an integer, got 'abc'"),
        ({"hidden_size": -64}, r"hidden_size must be an integer in \[1,"),
        ({"num_attention_heads": 4.5}, "num_attention_heads must be an integer"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be an integer"),
        ({"rms_norm_eps": "tiny"}, "rms_norm_eps must be a number"),
        ({"rope_scaling": {"rope_type": "linear"}}, "lacks the required key 'factor'"),
        ({"eos_token_id": ["x"]}, "eos_token_id must be"),
        ({"tie_word_embeddings": "yes"}, "tie_word_embeddings must be true or false"),
        ({"vocab_size": None}, "lacks required keys: vocab_size"),
    ],
)
def test_config_values_of_the_wrong_type(hf_dir, change, message):
    path = hf_dir / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **change}))
    with pytest.raises(InvalidConfigError, match=message) as error:
        load_hf_model(hf_dir)
    assert str(path) in str(error.value)


def test_config_larger_than_its_weights_is_refused_before_allocating(hf_dir):
    """A config claiming a million layers or a huge vocabulary is rejected from the
    checkpoint's headers, with no model allocated."""
    path = hf_dir / "config.json"
    raw = json.loads(path.read_text())
    path.write_text(json.dumps({**raw, "num_hidden_layers": 10**6}))
    with pytest.raises(InvalidConfigError, match=str(hf_dir)):
        load_hf_model(hf_dir)
    path.write_text(json.dumps({**raw, "vocab_size": 2**31 - 1}))
    with pytest.raises(TensorShapeMismatch, match="2147483647"):
        load_hf_model(hf_dir)


# -- EAGLE head directories --------------------------------------------------------------

@pytest.fixture
def target(hf_dir):
    return load_hf_model(hf_dir, progress=False)


def test_head_without_config_or_weights(head_dir, target):
    (head_dir / "model.safetensors").unlink()
    with pytest.raises(ModelFileNotFound, match=f"no weights in {head_dir}"):
        load_eagle_head(head_dir, target)
    (head_dir / "config.json").unlink()
    with pytest.raises(ModelFileNotFound, match="config.json does not exist"):
        load_eagle_head(head_dir, target)
    with pytest.raises(ModelFileNotFound, match="nowhere"):
        load_eagle_head(head_dir / "nowhere", target)


def test_head_with_bad_files(head_dir, target):
    weights, config = head_dir / "model.safetensors", head_dir / "config.json"
    good = weights.read_bytes()
    weights.write_bytes(good[:5])
    with pytest.raises(CorruptFileError, match=str(weights)):
        load_eagle_head(head_dir, target)
    weights.write_bytes(good)
    raw = json.loads(config.read_text())
    config.write_text(json.dumps({**raw, "num_hidden_layers": "abc"}))
    with pytest.raises(InvalidConfigError, match=f"{config}.*num_hidden_layers"):
        load_eagle_head(head_dir, target)
    config.write_text(json.dumps({**raw, "intermediate_size": 2**30}))
    with pytest.raises(InvalidConfigError, match=str(head_dir)):
        load_eagle_head(head_dir, target)
    config.write_bytes(b"\xfe\xff")
    with pytest.raises(CorruptFileError, match=f"{config} is not UTF-8"):
        load_eagle_head(head_dir, target)


def test_head_layer_gap_is_missing_tensors(head_dir, target, eagle_ckpt):
    from safetensors.torch import load_file, save_file

    tensors = load_file(str(head_dir / "model.safetensors"))
    tensors["layers.3.mlp.up_proj.weight"] = tensors["layers.0.mlp.up_proj.weight"].clone()
    save_file(tensors, str(head_dir / "model.safetensors"))
    with pytest.warns(UserWarning), pytest.raises(MissingTensorsError, match=r"layers\.1\."):
        load_eagle_head(head_dir, target)


# -- tokenizer files ---------------------------------------------------------------------

def test_bad_tokenizer_files(tmp_path):
    (tmp_path / "tokenizer.json").write_text("{broken")
    with pytest.raises(CorruptFileError, match="tokenizer.json"):
        Tokenizer.from_hf_dir(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    (tmp_path / "tokenizer_config.json").write_bytes(b"\xff\xfe")
    with pytest.raises(CorruptFileError, match="tokenizer_config.json is not UTF-8"):
        Tokenizer.from_hf_dir(tmp_path)
