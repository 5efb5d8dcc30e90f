"""Model ids (``org/name[@revision]``) resolved to local directories through the Hugging Face hub.

``resolve_target`` and ``resolve_draft`` take what a user passes as ``--model`` / ``--draft``
(``LLM(model=..., draft=...)``): an existing local path is returned as it is, whatever its
spelling; anything else that reads as a hub id is fetched with ``huggingface_hub``'s
``snapshot_download`` into its cache and the snapshot directory is returned. Only the files
eagle-hal reads are fetched: for a target its config, generation config, tokenizer files,
chat template and safetensors (never PyTorch ``.bin`` weights); for a draft head its config
and its weights (safetensors, else ``pytorch_model.bin``) plus ``draft_vocab.json``.

The hub library's own settings apply: ``HF_HOME`` / ``HF_HUB_CACHE`` place the cache,
``HF_HUB_OFFLINE=1`` forbids the network, tokens come from ``HF_TOKEN`` or ``hf auth
login``'s file. The cache location and offline mode are read from the environment at each
call, so a setting changed after import still counts.

After resolution every file eagle-hal needs is checked to be present (a cached snapshot
may hold fewer files than a model needs, and offline the hub library does not always say
so); a missing one raises ``ModelFileMissing`` naming it. An id that is not cached while
offline raises ``ModelNotCached``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from eagle_hal import settings
from eagle_hal.model.errors import ModelFileNotFound, ModelLoadError

__all__ = [
    "DRAFT_PATTERNS",
    "DRAFT_PICKLE_PATTERNS",
    "HubModelId",
    "ModelFileMissing",
    "ModelNotCached",
    "TARGET_PATTERNS",
    "hub_cache_dir",
    "offline",
    "parse_model_id",
    "resolve_draft",
    "resolve_target",
]

# What a target needs: config, generation settings, the tokenizer in any of the forms
# ``Tokenizer.from_hf_dir`` reads, the chat template, and the safetensors with their index.
TARGET_PATTERNS: tuple[str, ...] = (
    "config.json",
    "generation_config.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "tokenizer.model",
    "special_tokens_map.json",
    "added_tokens.json",
    "vocab.json",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
    "*.safetensors",
    "model.safetensors.index.json",
)
# A head's config and safetensors; ``draft_vocab.json`` is eagle-hal's own draft vocabulary.
DRAFT_PATTERNS: tuple[str, ...] = (
    "config.json",
    "*.safetensors",
    "model.safetensors.index.json",
    "draft_vocab.json",
)
# Fetched only when a head repository holds no safetensors (the EAGLE authors' own heads).
DRAFT_PICKLE_PATTERNS: tuple[str, ...] = ("pytorch_model.bin",)
# Files in subfolders (other formats, original checkpoints) and Mistral's duplicate
# ``consolidated`` weights are never needed.
IGNORE_PATTERNS: tuple[str, ...] = ("*/*", "consolidated*")

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*/[A-Za-z0-9][A-Za-z0-9_.\-]*$")
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


class ModelNotCached(ModelFileNotFound):
    """A hub id asked for while offline (``HF_HUB_OFFLINE=1``) that the cache does not hold."""

    def __init__(self, model_id: HubModelId, cache_dir: Path) -> None:
        super().__init__(
            f"{model_id} is not in the Hugging Face cache {cache_dir}, and HF_HUB_OFFLINE=1 "
            f"forbids downloading it (revision {model_id.revision or 'main'}); download it once "
            "online (unset HF_HUB_OFFLINE), point HF_HOME at a cache that holds it, or pass a "
            "local directory"
        )
        self.model_id, self.cache_dir = model_id, cache_dir


class ModelFileMissing(ModelFileNotFound):
    """A resolved model directory lacks a file eagle-hal needs (``missing`` names it)."""

    def __init__(self, what: str, directory: Path, missing: str, hint: str = "") -> None:
        super().__init__(f"{what} in {directory} lacks {missing}{hint}")
        self.directory, self.missing = directory, missing


class HubModelId:
    """A parsed ``org/name[@revision]``."""

    __slots__ = ("repo_id", "revision")

    def __init__(self, repo_id: str, revision: str | None) -> None:
        self.repo_id, self.revision = repo_id, revision

    def __str__(self) -> str:
        return self.repo_id + (f"@{self.revision}" if self.revision else "")

    def __repr__(self) -> str:
        return f"HubModelId({self.repo_id!r}, {self.revision!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, HubModelId) and (self.repo_id, self.revision) == (
            other.repo_id, other.revision)

    def __hash__(self) -> int:
        return hash((self.repo_id, self.revision))


def parse_model_id(text: str) -> HubModelId | None:
    """``org/name[@revision]`` parsed, or ``None`` when ``text`` is not one (a path)."""
    name, _, revision = text.partition("@")
    if not _ID.match(name) or ".." in name or (_ and not revision):
        return None
    if name.endswith((".gguf", ".safetensors", ".bin", ".json")):
        return None
    return HubModelId(name, revision or None)


def offline() -> bool:
    """Whether ``HF_HUB_OFFLINE`` forbids the network (read now, not at import)."""
    return bool(settings.get("HF_HUB_OFFLINE"))


def hub_cache_dir() -> Path:
    """The hub cache: ``HF_HUB_CACHE``, else ``$HF_HOME/hub``, else
    ``$XDG_CACHE_HOME/huggingface/hub`` (``~/.cache`` by default)."""
    if settings.get("HF_HUB_CACHE"):
        return Path(settings.get("HF_HUB_CACHE")).expanduser()
    if settings.get("HF_HOME"):
        return Path(settings.get("HF_HOME")).expanduser() / "hub"
    base = settings.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base).expanduser() / "huggingface" / "hub"


def resolve_target(model: str | Path, *, progress: bool = True) -> Path:
    """The local directory or GGUF file of ``model``: an existing path as it is, else a
    hub id fetched (``TARGET_PATTERNS``) and checked to hold a config, a tokenizer and a
    complete set of safetensors. Raises ``ModelFileNotFound`` for something that is
    neither, ``ModelNotCached`` offline, ``ModelFileMissing``, ``ModelLoadError`` for hub
    failures (unknown repository or revision, gated, network)."""
    path = Path(model)
    if path.exists():
        return path
    model_id = _as_id(str(model), "model")
    directory = _download(model_id, TARGET_PATTERNS, progress)
    check_target_files(directory, model_id)
    return directory


def resolve_draft(draft: str | Path, *, progress: bool = True) -> Path:
    """The local directory of EAGLE head ``draft``: an existing path as it is, else a hub
    id fetched (``DRAFT_PATTERNS``, then ``pytorch_model.bin`` only when the repository
    has no safetensors) and checked to hold ``config.json`` and weights. Raises as
    ``resolve_target``."""
    path = Path(draft)
    if path.exists():
        return path
    model_id = _as_id(str(draft), "draft")
    directory = _download(model_id, DRAFT_PATTERNS, progress)
    if not _head_weights(directory):
        directory = _download(model_id, DRAFT_PICKLE_PATTERNS, progress)
    check_draft_files(directory, model_id)
    return directory


def check_target_files(directory: Path, model_id: HubModelId | str = "the model") -> None:
    """``ModelFileMissing`` unless ``directory`` holds ``config.json``, a tokenizer
    (``tokenizer.json``, ``tokenizer.model`` or ``vocab.json``) and safetensors weights
    (``model.safetensors``, or the index with every shard it names)."""
    what = f"model {model_id}"
    if not (directory / "config.json").is_file():
        raise ModelFileMissing(what, directory, "config.json")
    if not any((directory / name).is_file() for name in _TOKENIZER_FILES):
        raise ModelFileMissing(what, directory, "a tokenizer (" + ", ".join(_TOKENIZER_FILES)
                               + ")")
    _check_safetensors(directory, what, allow_pickle=False)


def check_draft_files(directory: Path, model_id: HubModelId | str = "the draft head") -> None:
    """``ModelFileMissing`` unless ``directory`` holds ``config.json`` and weights
    (``model.safetensors``, the index with its shards, or ``pytorch_model.bin``)."""
    what = f"EAGLE head {model_id}"
    if not (directory / "config.json").is_file():
        raise ModelFileMissing(what, directory, "config.json")
    _check_safetensors(directory, what, allow_pickle=True)


def _check_safetensors(directory: Path, what: str, *, allow_pickle: bool) -> None:
    index = directory / "model.safetensors.index.json"
    if index.is_file():
        from eagle_hal.model.loading.hf import read_json

        weight_map = read_json(index).get("weight_map")
        shards = sorted(set(weight_map.values())) if isinstance(weight_map, dict) else []
        for shard in shards:
            if isinstance(shard, str) and not (directory / shard).is_file():
                raise ModelFileMissing(what, directory, f"{shard} (named by {index.name})")
        return
    if any(p.is_file() for p in directory.glob("*.safetensors")):
        return
    if allow_pickle and (directory / "pytorch_model.bin").is_file():
        return
    wanted = "model.safetensors" + (" or pytorch_model.bin" if allow_pickle else "")
    hint = "" if allow_pickle else (
        "; eagle-hal reads targets only as safetensors (a repository with only .bin "
        "weights must be converted: transformers' save_pretrained(out, "
        "safe_serialization=True))"
    )
    raise ModelFileMissing(what, directory, wanted, hint)


def _head_weights(directory: Path) -> bool:
    return any(p.is_file() for p in directory.glob("*.safetensors")) or (
        directory / "pytorch_model.bin").is_file()


def _as_id(text: str, flag: str) -> HubModelId:
    model_id = parse_model_id(text)
    if model_id is None:
        raise ModelFileNotFound(
            f"--{flag} {text!r}: no such file or directory, and not a Hugging Face model id "
            "(org/name or org/name@revision)"
        )
    return model_id


def _download(model_id: HubModelId, patterns: Sequence[str], progress: bool) -> Path:
    try:
        from huggingface_hub import errors as hub_errors
        from huggingface_hub import snapshot_download
    except ImportError as error:
        raise ModelLoadError(
            f"{model_id} is not a local path; fetching model ids needs huggingface_hub: "
            "pip install 'eagle-hal[hf]'"
        ) from error
    cache = hub_cache_dir()
    is_offline = offline()
    arguments: dict[str, Any] = dict(
        revision=model_id.revision,
        cache_dir=str(cache),
        allow_patterns=list(patterns),
        ignore_patterns=list(IGNORE_PATTERNS),
        local_files_only=is_offline,
    )
    if not progress:
        arguments["tqdm_class"] = _SilentTqdm.get()
    try:
        return Path(snapshot_download(model_id.repo_id, **arguments))
    except hub_errors.IncompleteSnapshotError as error:
        # the snapshot exists but lacks some requested files: the checks after
        # resolution name the one eagle-hal needs, if it is among them
        snapshot = cached_snapshot(cache, model_id)
        if snapshot is not None:
            return snapshot
        raise ModelNotCached(model_id, cache) from error
    except hub_errors.LocalEntryNotFoundError as error:
        if is_offline:
            raise ModelNotCached(model_id, cache) from error
        raise ModelLoadError(
            f"{model_id} could not be fetched from the Hugging Face hub and is not cached in "
            f"{cache}: {error}"
        ) from error
    except hub_errors.GatedRepoError as error:
        raise ModelLoadError(
            f"{model_id} is gated: accept its terms on huggingface.co and log in (hf auth "
            "login, or HF_TOKEN)"
        ) from error
    except hub_errors.RevisionNotFoundError as error:
        raise ModelFileNotFound(
            f"{model_id}: revision {model_id.revision!r} does not exist on the hub"
        ) from error
    except hub_errors.RepositoryNotFoundError as error:
        raise ModelFileNotFound(
            f"{model_id} is neither a local path nor a Hugging Face model repository (or it "
            "is private: log in with hf auth login, or set HF_TOKEN)"
        ) from error
    except hub_errors.HFValidationError as error:
        raise ModelFileNotFound(f"{model_id} is not a valid Hugging Face model id: {error}") \
            from error
    except (OSError, hub_errors.HfHubHTTPError) as error:
        raise ModelLoadError(f"fetching {model_id} from the Hugging Face hub failed: {error}") \
            from error


def cached_snapshot(cache: Path, model_id: HubModelId) -> Path | None:
    """The cached snapshot directory of ``model_id`` (its revision a branch or tag named in
    ``refs/``, or a commit hash), or ``None`` when the cache lacks it."""
    repo = cache / ("models--" + model_id.repo_id.replace("/", "--"))
    revision = model_id.revision or "main"
    ref = repo / "refs" / revision
    if ref.is_file():
        revision = ref.read_text(encoding="utf-8").strip()
    snapshot = repo / "snapshots" / revision
    return snapshot if snapshot.is_dir() else None


class _SilentTqdm:
    """A tqdm class that shows nothing, for ``progress=False``."""

    _class: Any = None

    @classmethod
    def get(cls) -> Any:
        if cls._class is None:
            from tqdm.auto import tqdm

            class Silent(tqdm):  # type: ignore[misc, valid-type]
                def __init__(self, *args: Any, **kwargs: Any) -> None:
                    kwargs["disable"] = True
                    super().__init__(*args, **kwargs)

            cls._class = Silent
        return cls._class
