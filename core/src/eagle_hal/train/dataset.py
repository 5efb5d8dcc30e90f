"""The self-distilled data set: token sequences the target wrote, and where each answer starts.

Each sequence is one chat exchange, ``chat_template(user prompt) + answer (+ EOS)``, every
token of the user prompt and the answer sampled from the target. ``answer_starts[i]`` is the
index of the first answer token in sequence ``i``, so ``sequence(i)[:answer_starts[i]]`` is
the templated prompt the engine decodes from. A held-out fraction (``is_validation``) is
never trained on; its prompts measure accept length with the real engine.

Stored as one safetensors file (no pickles): ``tokens`` (int32, all sequences back to back),
``offsets`` ``[n + 1]``, ``answer_starts`` ``[n]``, ``is_validation`` ``[n]``,
``answer_temperatures`` ``[n]``; the provenance (``DatasetInfo``) as JSON in the metadata.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shlex
from pathlib import Path
from typing import NamedTuple

import torch

__all__ = [
    "PATH_OPTIONS",
    "DatasetInfo",
    "DistillDataset",
    "PaddedRows",
    "command_with_file_names",
    "file_name",
    "file_sha256",
]

_INFO_KEY = "eagle_hal.dataset"


@dataclasses.dataclass(frozen=True, slots=True)
class DatasetInfo:
    """Where a data set came from: enough to regenerate it."""

    target: str  # the target model's file name (``file_name``); its SHA-256 below
    target_sha256: str
    seed: int
    num_prompts: int  # prompts asked for (some are dropped: empty or duplicate)
    max_prompt_tokens: int
    max_new_tokens: int
    prompt_temperatures: tuple[float, ...]
    answer_temperatures: tuple[float, ...]
    top_p: float
    generation_seconds: float
    command: str = ""
    prompt_openers: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DatasetInfo:
        raw = json.loads(text)
        for key in ("prompt_temperatures", "answer_temperatures", "prompt_openers"):
            if key in raw:
                raw[key] = tuple(raw[key])
        return cls(**raw)


class PaddedRows(NamedTuple):
    """Sequences right-padded to one length, on one device."""

    tokens: torch.Tensor  # [B, L] int64 (padding: 0)
    lengths: torch.Tensor  # [B] int64
    answer_starts: torch.Tensor  # [B] int64


@dataclasses.dataclass(frozen=True, eq=False)
class DistillDataset:
    """Token sequences with answer boundaries and a validation split (CPU tensors)."""

    tokens: torch.Tensor  # [total_tokens] int64
    offsets: torch.Tensor  # [n + 1] int64, sequence i is tokens[offsets[i]:offsets[i + 1]]
    answer_starts: torch.Tensor  # [n] int64, index of the first answer token within sequence i
    is_validation: torch.Tensor  # [n] bool
    answer_temperatures: torch.Tensor  # [n] float32
    info: DatasetInfo

    def __post_init__(self) -> None:
        n = self.num_sequences
        if self.offsets.shape != (n + 1,) or int(self.offsets[-1]) != self.tokens.numel():
            raise ValueError("offsets must be [n + 1] and end at the number of tokens")
        for name in ("answer_starts", "is_validation", "answer_temperatures"):
            if getattr(self, name).shape != (n,):
                raise ValueError(f"{name} must have one entry per sequence ({n})")
        lengths = self.lengths
        if bool(((self.answer_starts < 2) | (self.answer_starts >= lengths)).any()):
            raise ValueError("every sequence needs a prompt of 2+ tokens and a non-empty answer")

    @classmethod
    def from_sequences(
        cls,
        sequences: list[list[int]],
        answer_starts: list[int],
        is_validation: list[bool],
        answer_temperatures: list[float],
        info: DatasetInfo,
    ) -> DistillDataset:
        lengths = torch.tensor([len(s) for s in sequences], dtype=torch.int64)
        offsets = torch.zeros(len(sequences) + 1, dtype=torch.int64)
        offsets[1:] = lengths.cumsum(0)
        return cls(
            tokens=torch.tensor([t for s in sequences for t in s], dtype=torch.int64),
            offsets=offsets,
            answer_starts=torch.tensor(answer_starts, dtype=torch.int64),
            is_validation=torch.tensor(is_validation, dtype=torch.bool),
            answer_temperatures=torch.tensor(answer_temperatures, dtype=torch.float32),
            info=info,
        )

    # -- sizes and views -------------------------------------------------------------------

    @property
    def num_sequences(self) -> int:
        return int(self.offsets.numel()) - 1

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.numel())

    @property
    def lengths(self) -> torch.Tensor:
        return self.offsets[1:] - self.offsets[:-1]  # [n]

    @property
    def num_answer_tokens(self) -> int:
        return int((self.lengths - self.answer_starts).sum())

    def sequence(self, index: int) -> list[int]:
        return self.tokens[int(self.offsets[index]) : int(self.offsets[index + 1])].tolist()

    def prompt(self, index: int) -> list[int]:
        """The templated prompt of sequence ``index`` (what the engine decodes from)."""
        return self.sequence(index)[: int(self.answer_starts[index])]

    def train_indices(self) -> torch.Tensor:
        return torch.nonzero(~self.is_validation).flatten()

    def validation_indices(self) -> torch.Tensor:
        return torch.nonzero(self.is_validation).flatten()

    def padded(self, indices: torch.Tensor, device: torch.device | str = "cpu") -> PaddedRows:
        """Sequences ``indices`` ``[B]`` right-padded with 0 to the longest of them."""
        lengths = self.lengths[indices]
        width = int(lengths.max())
        columns = torch.arange(width)
        inside = columns[None, :] < lengths[:, None]  # [B, L]
        gather = (self.offsets[indices][:, None] + columns[None, :]).clamp(max=self.num_tokens - 1)
        tokens = torch.where(inside, self.tokens[gather], 0)
        return PaddedRows(
            tokens.to(device), lengths.to(device), self.answer_starts[indices].to(device)
        )

    # -- storage ---------------------------------------------------------------------------

    def save(self, path: str | Path) -> None:
        """Write the data set to one safetensors file (parent directories are created)."""
        from safetensors.torch import save_file

        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tensors = {
            "tokens": self.tokens.to(torch.int32),
            "offsets": self.offsets,
            "answer_starts": self.answer_starts,
            "is_validation": self.is_validation.to(torch.uint8),
            "answer_temperatures": self.answer_temperatures,
        }
        save_file(tensors, str(path), metadata={_INFO_KEY: self.info.to_json()})

    @classmethod
    def load(cls, path: str | Path) -> DistillDataset:
        """Read a file written by ``save``. Raises ``FileNotFoundError`` or ``ValueError``
        (not a data set written by eagle-hal)."""
        from safetensors import safe_open

        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(
                f"no data set at {path}; run `eagle-hal train-draft --stage data` first"
            )
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            if _INFO_KEY not in metadata:
                raise ValueError(
                    f"{path} is not an eagle-hal training data set (no {_INFO_KEY} metadata)"
                )
            tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
        return cls(
            tokens=tensors["tokens"].to(torch.int64),
            offsets=tensors["offsets"].to(torch.int64),
            answer_starts=tensors["answer_starts"].to(torch.int64),
            is_validation=tensors["is_validation"].to(torch.bool),
            answer_temperatures=tensors["answer_temperatures"].float(),
            info=DatasetInfo.from_json(metadata[_INFO_KEY]),
        )


def file_sha256(path: str | Path) -> str:
    """SHA-256 of a model file, or of a model directory's top-level files (names and
    contents, in name order; subdirectories are not the model's)."""
    path = Path(path)
    digest = hashlib.sha256()
    files = sorted(p for p in path.iterdir() if p.is_file()) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(file.name.encode())
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


# The options of ``eagle-hal train-draft`` whose values are files or directories.
PATH_OPTIONS = frozenset({"--model", "--data", "--out", "--vocab-data", "--prompt-openers"})


def file_name(path: str | Path) -> str:
    """How provenance names a file or directory: by its name alone, never by where it lay
    on the machine that made it (the SHA-256 recorded beside it identifies the content)."""
    return Path(path).name if str(path) else ""


def command_with_file_names(command: str) -> str:
    """A recorded command line with the value of every ``PATH_OPTIONS`` option cut to its
    file name (``--model /data/m.gguf`` -> ``--model m.gguf``); other words unchanged."""
    if not command:
        return command
    words = shlex.split(command)
    for index, word in enumerate(words):
        flag, equals, value = word.partition("=")
        if flag not in PATH_OPTIONS:
            continue
        if equals:
            words[index] = f"{flag}={file_name(value)}"
        elif index + 1 < len(words):
            words[index + 1] = file_name(words[index + 1])
    return shlex.join(words)
