"""Model ids resolved through a real Hugging Face hub cache laid out on disk (no network).

The cache is ``$HF_HOME/hub/models--org--name/`` with ``snapshots/<sha>/`` directories and
``refs/main`` / ``refs/<tag>`` files naming them, as ``huggingface_hub`` writes it; every
test runs with ``HF_HUB_OFFLINE=1``. What would be downloaded online is checked by
replacing ``snapshot_download`` and reading the arguments it was called with.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from eagle_hal.model import hub
from eagle_hal.model.errors import ModelFileNotFound, ModelLoadError
from eagle_hal.model.hub import ModelFileMissing, ModelNotCached, parse_model_id
from eagle_hal.model.loading import load_eagle_head, load_target

SHA_MAIN = "a" * 40
SHA_V1 = "b" * 40
WORDS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "hello", "world"]


def write_word_tokenizer(directory, chat_template: str = "x") -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    backend = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="hello"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.add_special_tokens(WORDS[:3])
    backend.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(json.dumps({
        "eos_token": "<|im_end|>", "chat_template": chat_template}))


@pytest.fixture(autouse=True)
def _helpers(save_hf, eagle_ckpt):
    global save_tiny_hf, write_eagle1
    save_tiny_hf, write_eagle1 = save_hf, eagle_ckpt.write_eagle1


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """An empty offline hub cache under ``HF_HOME``; returns its ``hub`` directory."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    root = tmp_path / "hf-home" / "hub"
    root.mkdir(parents=True)
    return root


def snapshot(cache, repo_id: str, sha: str, refs: tuple[str, ...] = ("main",)):
    """The snapshot directory of ``repo_id`` at commit ``sha``, with ``refs`` naming it."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    directory = repo / "snapshots" / sha
    directory.mkdir(parents=True)
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        (repo / "refs" / ref).write_text(sha)
    return directory


def cached_target(cache, repo_id: str, sha: str, refs=("main",), seed: int = 0, vocab: int = 13):
    directory = snapshot(cache, repo_id, sha, refs)
    model = save_tiny_hf("llama", directory, seed=seed, vocab_size=vocab)
    write_word_tokenizer(directory, chat_template="{{ messages[0]['content'] }}")
    return model, directory


def test_ids_parse_and_paths_do_not():
    assert parse_model_id("org/name") == hub.HubModelId("org/name", None)
    assert parse_model_id("org/name@v1.0") == hub.HubModelId("org/name", "v1.0")
    for text in ("name", "org/name@", "/abs/path", "./rel/x", "a/b/c", "org/model.gguf",
                 "../x/y", "org/na me"):
        assert parse_model_id(text) is None, text


def test_target_by_id_and_by_revision_load_the_right_snapshot(cache):
    """``org/name`` follows refs/main; ``org/name@v1`` follows refs/v1; a commit hash names
    its snapshot directly. Each loads the weights of its own snapshot."""
    hf_main, main_dir = cached_target(cache, "org/tiny", SHA_MAIN, seed=1)
    hf_v1, v1_dir = cached_target(cache, "org/tiny", SHA_V1, refs=("v1",), seed=2)
    assert hub.resolve_target("org/tiny") == main_dir
    assert hub.resolve_target("org/tiny@v1") == v1_dir
    assert hub.resolve_target(f"org/tiny@{SHA_V1}") == v1_dir
    for model_id, hf_model in (("org/tiny", hf_main), ("org/tiny@v1", hf_v1)):
        model, tokenizer = load_target(model_id, progress=False)
        expected = hf_model.model.embed_tokens.weight
        torch.testing.assert_close(model.model.embed_tokens.weight, expected)
        assert tokenizer.encode("hello world", add_special_tokens=False) == [3, 4]


def test_an_existing_local_path_wins_over_an_id(cache, tmp_path, monkeypatch):
    """A directory spelled like an id is read from disk; the hub is never asked."""
    cached_target(cache, "org/tiny", SHA_MAIN)
    local = tmp_path / "work"
    (local / "org").mkdir(parents=True)
    save_tiny_hf("llama", local / "org" / "tiny", seed=5, vocab_size=13)
    monkeypatch.chdir(local)

    def no_hub(*args, **kwargs):
        raise AssertionError("the hub was asked for a local path")

    monkeypatch.setattr("huggingface_hub.snapshot_download", no_hub)
    assert hub.resolve_target("org/tiny") == hub.Path("org/tiny")


def test_a_missing_file_is_named(cache):
    """A cached snapshot without a file eagle-hal needs: ModelFileMissing naming it."""
    _, directory = cached_target(cache, "org/tiny", SHA_MAIN)
    (directory / "tokenizer.json").unlink()
    with pytest.raises(ModelFileMissing, match=r"org/tiny.*lacks a tokenizer"):
        hub.resolve_target("org/tiny")
    write_word_tokenizer(directory, chat_template="x")
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelFileMissing, match="lacks model.safetensors") as caught:
        hub.resolve_target("org/tiny")
    assert caught.value.directory == directory


def test_a_shard_the_index_names_must_be_there(cache):
    _, directory = cached_target(cache, "org/tiny", SHA_MAIN)
    (directory / "model.safetensors").rename(directory / "model-00001-of-00002.safetensors")
    weight_map = {"model.norm.weight": "model-00001-of-00002.safetensors",
                  "lm_head.weight": "model-00002-of-00002.safetensors"}
    (directory / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    with pytest.raises(ModelFileMissing, match="model-00002-of-00002.safetensors"):
        hub.resolve_target("org/tiny")


def test_a_pickle_only_target_is_refused_with_the_conversion(cache):
    _, directory = cached_target(cache, "org/tiny", SHA_MAIN)
    (directory / "model.safetensors").unlink()
    torch.save({"x": torch.zeros(1)}, directory / "pytorch_model.bin")
    with pytest.raises(ModelFileMissing, match="only as safetensors"):
        hub.resolve_target("org/tiny")


def test_not_cached_while_offline_names_id_revision_and_setting(cache):
    with pytest.raises(ModelNotCached, match=r"org/absent@v2.*HF_HUB_OFFLINE=1.*revision v2") \
            as caught:
        hub.resolve_target("org/absent@v2")
    assert isinstance(caught.value, ModelFileNotFound) and isinstance(caught.value, ModelLoadError)
    cached_target(cache, "org/tiny", SHA_MAIN)
    with pytest.raises(ModelNotCached, match="org/tiny@nope"):
        hub.resolve_target("org/tiny@nope")


def test_neither_a_path_nor_an_id(cache, tmp_path):
    with pytest.raises(ModelFileNotFound, match="not a Hugging Face model id"):
        hub.resolve_target(str(tmp_path / "nothing" / "here" / "x.gguf"))


def test_draft_by_id_loads_a_head(cache, tmp_path):
    """A head cached as org/head loads by id, the same as from its directory."""
    target, _ = load_target(cached_target(cache, "org/tiny", SHA_MAIN, vocab=97)[1],
                            progress=False)
    directory = snapshot(cache, "org/head", SHA_MAIN)
    shutil.rmtree(directory)
    write_eagle1(directory)
    head = load_eagle_head("org/head", target)
    by_path = load_eagle_head(directory, target)
    for (name, a), (_, b) in zip(head.state_dict().items(), by_path.state_dict().items(),
                                 strict=True):
        torch.testing.assert_close(a, b, msg=name)
    (directory / "model.safetensors").unlink()
    with pytest.raises(ModelFileMissing, match="model.safetensors or pytorch_model.bin"):
        hub.resolve_draft("org/head")


class Recorder:
    """Stands in for ``snapshot_download``: records each call, returns a directory."""

    def __init__(self, directory, fill=None):
        self.calls, self.directory, self.fill = [], directory, fill

    def __call__(self, repo_id, **kwargs):
        self.calls.append((repo_id, kwargs))
        if self.fill is not None:
            self.fill(len(self.calls), self.directory)
        return str(self.directory)


def test_target_download_asks_for_the_needed_files_only(cache, tmp_path, monkeypatch):
    """Online, a target is fetched with patterns covering config, generation config,
    tokenizer, chat template, safetensors and index, and no .bin; the cache, the revision
    and offline mode are passed through."""
    monkeypatch.delenv("HF_HUB_OFFLINE")
    directory = tmp_path / "snap"
    directory.mkdir()
    save_tiny_hf("llama", directory, vocab_size=13)
    write_word_tokenizer(directory, chat_template="x")
    recorder = Recorder(directory)
    monkeypatch.setattr("huggingface_hub.snapshot_download", recorder)
    assert hub.resolve_target("org/tiny@v3") == directory
    [(repo_id, kwargs)] = recorder.calls
    assert repo_id == "org/tiny" and kwargs["revision"] == "v3"
    assert kwargs["cache_dir"] == str(cache) and kwargs["local_files_only"] is False
    patterns = set(kwargs["allow_patterns"])
    for needed in ("config.json", "generation_config.json", "tokenizer.json",
                   "tokenizer_config.json", "tokenizer.model", "chat_template.jinja",
                   "*.safetensors", "model.safetensors.index.json"):
        assert needed in patterns
    assert not any(p.endswith((".bin", ".pt", ".pth", ".gguf")) or p == "*" for p in patterns)
    assert "*/*" in kwargs["ignore_patterns"]
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    hub.resolve_target("org/tiny")
    assert recorder.calls[-1][1]["local_files_only"] is True
    assert recorder.calls[-1][1]["revision"] is None


def test_draft_download_takes_the_pickle_only_without_safetensors(tmp_path, monkeypatch):
    """A head is fetched as config + safetensors first; pytorch_model.bin is asked for
    only when no safetensors came."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    directory = tmp_path / "head"
    directory.mkdir()

    def fill(call, where):
        (where / "config.json").write_text("{}")
        if call == 2:
            torch.save({"fc.weight": torch.zeros(1)}, where / "pytorch_model.bin")

    recorder = Recorder(directory, fill)
    monkeypatch.setattr("huggingface_hub.snapshot_download", recorder)
    assert hub.resolve_draft("org/head") == directory
    first, second = (kwargs["allow_patterns"] for _, kwargs in recorder.calls)
    assert "config.json" in first and "*.safetensors" in first
    assert not any(p.endswith(".bin") for p in first)
    assert second == ["pytorch_model.bin"]
    assert recorder.calls[0][1]["cache_dir"] == str(tmp_path / "home" / "hub")


def test_hub_errors_become_model_load_errors(tmp_path, monkeypatch):
    import httpx
    from huggingface_hub import errors

    monkeypatch.setenv("HF_HOME", str(tmp_path))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def gated(repo_id, **kwargs):
        request = httpx.Request("GET", "https://huggingface.co/org/private")
        raise errors.GatedRepoError("gated", response=httpx.Response(401, request=request))

    monkeypatch.setattr("huggingface_hub.snapshot_download", gated)
    with pytest.raises(ModelLoadError, match="gated.*HF_TOKEN"):
        hub.resolve_target("org/private")

    def connection(repo_id, **kwargs):
        raise errors.LocalEntryNotFoundError("connection refused")

    monkeypatch.setattr("huggingface_hub.snapshot_download", connection)
    with pytest.raises(ModelLoadError, match="could not be fetched.*connection refused"):
        hub.resolve_target("org/tiny")


def test_the_command_line_reports_an_uncached_id_in_one_line(cache, capsys):
    """``eagle-hal generate --model org/absent`` offline: a usage-class exit status and one
    line naming the id and HF_HUB_OFFLINE, before any backend runs a forward."""
    from eagle_hal.cli import main

    status = main(["generate", "--device", "cpu", "--model", "org/absent@v1", "--draft", "none",
                   "--prompt", "hi"])
    err = capsys.readouterr().err.strip()
    assert status == 2
    assert len(err.splitlines()) == 1 and "org/absent@v1" in err and "HF_HUB_OFFLINE=1" in err


def test_loading_a_snapshot_names_the_repository(cache, capsys):
    """The loading bar of a hub snapshot names org/name, not the commit hash."""
    from eagle_hal.model.loading.hf import load_hf_model

    _, directory = cached_target(cache, "org/tiny", SHA_MAIN)
    load_hf_model(directory, progress=True)
    err = capsys.readouterr().err
    assert "loading org/tiny" in err and SHA_MAIN not in err


def test_a_cache_of_blobs_and_links_loads(cache):
    """As huggingface_hub writes its cache: snapshot entries are relative links into
    ``blobs/``; the id loads through them."""
    import hashlib
    import os

    hf_model, directory = cached_target(cache, "org/linked", SHA_MAIN, seed=3)
    blobs = directory.parent.parent / "blobs"
    blobs.mkdir()
    for entry in list(directory.iterdir()):
        digest = hashlib.sha256(entry.read_bytes()).hexdigest()
        entry.rename(blobs / digest)
        entry.symlink_to(os.path.relpath(blobs / digest, directory))
    assert all(entry.is_symlink() for entry in directory.iterdir())
    model, _ = load_target("org/linked", progress=False)
    torch.testing.assert_close(model.model.norm.weight, hf_model.model.norm.weight)
