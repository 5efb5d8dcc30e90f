"""A draft vocabulary: the tokens an EAGLE-1 head may propose, the most frequent first.

An EAGLE-1 head scores its next token with the target's ``lm_head`` over the whole
vocabulary (49,152 x 576 for SmolLM2). On a CPU that matrix is a fifth of the target's
weights, read once per draft step: five draft steps cost about as much as a target forward.
Restricting the draft's ``lm_head`` to the V tokens the target writes most often
(frequency-ranked drafting, the idea of FR-Spec) divides that cost by vocab / V. It stays
lossless: the target verifies every draft token and picks the bonus token from its whole
vocabulary; a token outside the draft vocabulary is only never proposed.

The ranking is counted on self-distilled answers (``train-draft`` counts the head's own
training answers; never a benchmark's) and stored next to the head as ``draft_vocab.json``:
JSON, not safetensors, because other engines' loaders read every ``*.safetensors`` of a head
directory as weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import torch

from eagle_hal.model.errors import ModelFileNotFound, UnsupportedModelError

__all__ = [
    "DEFAULT_COVERAGE", "DraftVocabulary", "FILE_NAME", "count_answer_tokens", "parse_size",
    "require_file", "restrict",
]

FILE_NAME = "draft_vocab.json"
_FORMAT = "eagle-hal draft vocabulary 1"
DEFAULT_COVERAGE = 0.995  # the default size keeps this share of the counted answer tokens
_SIZE_STEP = 1024  # the default size is a multiple of this (GEMM-friendly)


@dataclasses.dataclass(frozen=True, slots=True)
class DraftVocabulary:
    """Token ids ranked by how often the target wrote them (``counts``, non-increasing;
    ties ranked by the smaller id). ``default_size``: how many of them a head drafts from
    unless told otherwise. ``source``: where the counts came from (data file, seed, ...)."""

    token_ids: tuple[int, ...]
    counts: tuple[int, ...]
    vocab_size: int  # the target's
    default_size: int
    source: dict[str, Any] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.token_ids or len(self.token_ids) != len(self.counts):
            raise ValueError("a draft vocabulary needs one count per token id, and at least one id")
        if len(set(self.token_ids)) != len(self.token_ids):
            raise ValueError("a draft vocabulary lists a token id twice")
        if min(self.token_ids) < 0 or max(self.token_ids) >= self.vocab_size:
            raise ValueError(f"draft vocabulary token ids must lie in [0, {self.vocab_size})")
        if (any(a < b for a, b in zip(self.counts, self.counts[1:], strict=False))
                or self.counts[-1] < 0):
            raise ValueError("draft vocabulary counts must be non-negative and non-increasing")
        if not 1 <= self.default_size <= len(self.token_ids):
            raise ValueError(
                f"default_size {self.default_size} must lie in [1, {len(self.token_ids)}]"
            )

    @classmethod
    def from_counts(
        cls, counts: torch.Tensor, *, coverage: float = DEFAULT_COVERAGE,
        source: dict[str, Any] | None = None,
    ) -> DraftVocabulary:
        """Rank the tokens with a count above zero (``counts [vocab]``); the default size is
        the smallest multiple of 1,024 that keeps ``coverage`` of the counted tokens."""
        if counts.dim() != 1 or int(counts.sum()) <= 0:
            raise ValueError("counts must be a [vocab] tensor with at least one token counted")
        if not 0.0 < coverage <= 1.0:
            raise ValueError(f"coverage must lie in (0, 1], got {coverage}")
        ids = torch.arange(counts.numel())
        seen = counts > 0
        # sort by (-count, id): a stable sort by count of ids already in ascending order
        order = torch.sort(-counts[seen].long(), stable=True).indices
        token_ids = ids[seen][order]
        ranked = counts[token_ids].long()
        kept = torch.cumsum(ranked, 0).double() / float(ranked.sum())
        needed = int(torch.searchsorted(kept, torch.tensor(coverage, dtype=torch.float64))) + 1
        size = min(-(-needed // _SIZE_STEP) * _SIZE_STEP, token_ids.numel())
        return cls(tuple(token_ids.tolist()), tuple(ranked.tolist()), counts.numel(), size,
                   dict(source or {}))

    def coverage(self, size: int) -> float:
        """The share of the counted tokens among the ``size`` most frequent."""
        return sum(self.counts[:size]) / sum(self.counts)

    def ids(self, size: int | None = None) -> torch.Tensor:
        """The ``size`` (default: ``default_size``) most frequent token ids, ``[size]`` int64.
        Past the tokens the data contained come the unseen ones in id order (a byte-pair
        tokenizer numbers its tokens roughly by its own corpus's frequency)."""
        size = self.default_size if size is None else size
        if not 1 <= size <= self.vocab_size:
            raise ValueError(f"a draft vocabulary holds 1..{self.vocab_size} tokens, not {size}")
        ranked = torch.tensor(self.token_ids[:size], dtype=torch.int64)
        if size <= len(self.token_ids):
            return ranked
        unseen = torch.ones(self.vocab_size, dtype=torch.bool)
        unseen[list(self.token_ids)] = False
        return torch.cat([ranked, unseen.nonzero()[: size - len(self.token_ids), 0]])

    # -- the file ---------------------------------------------------------------------------

    def save(self, directory: str | Path) -> Path:
        path = Path(directory) / FILE_NAME
        raw = {"format": _FORMAT, "vocab_size": self.vocab_size,
               "default_size": self.default_size, "source": self.source,
               "token_ids": list(self.token_ids), "counts": list(self.counts)}
        path.write_text(json.dumps(raw, separators=(",", ":")) + "\n")
        return path

    @classmethod
    def load(cls, directory: str | Path) -> DraftVocabulary | None:
        """The ranking stored in head ``directory``, ``None`` when it has none. Raises
        ``UnsupportedModelError`` for a file that is not a draft vocabulary."""
        path = Path(directory) / FILE_NAME
        if not path.is_file():
            return None
        try:
            raw = json.loads(path.read_text())
            if not isinstance(raw, dict) or raw.get("format") != _FORMAT:
                raise ValueError(f"format {raw.get('format')!r}, expected {_FORMAT!r}")
            return cls(tuple(int(i) for i in raw["token_ids"]),
                       tuple(int(c) for c in raw["counts"]),
                       int(raw["vocab_size"]), int(raw["default_size"]),
                       dict(raw.get("source", {})))
        except (ValueError, KeyError, TypeError) as exc:
            raise UnsupportedModelError(
                f"{path} is not a readable draft vocabulary: {exc}"
            ) from exc


def count_answer_tokens(dataset: Any, vocab_size: int) -> torch.Tensor:
    """How often each token appears in the answers of ``dataset``'s training sequences (a
    ``DistillDataset``; held-out sequences are not counted): ``[vocab_size]`` int64."""
    counts = torch.zeros(vocab_size, dtype=torch.int64)
    for i in range(dataset.num_sequences):
        if bool(dataset.is_validation[i]):
            continue
        start = int(dataset.offsets[i]) + int(dataset.answer_starts[i])
        answer = dataset.tokens[start : int(dataset.offsets[i + 1])].long()
        if answer.numel() and int(answer.max()) >= vocab_size:
            raise ValueError(f"the data set holds token id {int(answer.max())}, beyond a "
                             f"vocabulary of {vocab_size}: it was written by another target")
        counts += torch.bincount(answer, minlength=vocab_size)
    return counts


_WORDS = ("auto", "default", "full")


def parse_size(text: str | int) -> int | str:
    """A draft vocabulary size as given on a command line: ``"auto"``, ``"default"``,
    ``"full"`` or a positive number. Raises ``ValueError`` otherwise."""
    if isinstance(text, int):
        value: int | str = text
    else:
        word = text.strip().lower()
        value = word if word in _WORDS else (int(word) if word.isdigit() else word)
    if value in _WORDS or (isinstance(value, int) and value >= 1):
        return value
    raise ValueError(
        f'a draft vocabulary size is a positive number, "auto", "default" or "full"; got {text!r}'
    )


def require_file(directory: str | Path | None, size: int | str) -> None:
    """Raise ``ModelFileNotFound`` when a number of tokens is asked of a head directory
    without a ranking (checkable before any model loads)."""
    size = parse_size(size)
    if (isinstance(size, int) and directory is not None
            and not (Path(directory) / FILE_NAME).is_file()):
        raise ModelFileNotFound(
            f"a draft vocabulary of {size} tokens needs {FILE_NAME} in the head directory "
            f"({directory}); write one with `eagle-hal train-draft --stage vocab`"
        )


def restrict(head: Any, directory: str | Path | None, size: int | str, backend: Any = None) -> Any:
    """``head`` drafting from the vocabulary stored in ``directory``: ``size`` is
    ``"auto"`` (``"default"`` where ``backend.prefers_draft_vocabulary``, else ``"full"``;
    ``"full"`` without a backend), ``"default"`` (the file's default size; the full
    vocabulary when the head has no file), ``"full"`` (the whole target vocabulary) or a
    number of tokens. Returns the head itself
    or a view of it (parameters shared). Raises ``ModelFileNotFound`` when a size is asked
    of a head without a ranking, ``UnsupportedModelError`` for a head that carries its own
    vocabulary (EAGLE-3) or a ranking of another vocabulary, ``ValueError`` for a bad size."""
    size = parse_size(size)
    if size == "auto":
        size = "default" if getattr(backend, "prefers_draft_vocabulary", False) else "full"
    if size == "full" or head is None:
        return head
    if not hasattr(head, "with_vocabulary"):
        if size == "default":
            return head
        raise UnsupportedModelError(
            f'a {type(head).__name__} carries its own draft vocabulary; use "default" or "full"'
        )
    require_file(directory, size)
    vocabulary = DraftVocabulary.load(directory) if directory is not None else None
    if vocabulary is None:
        if size == "default":
            return head
        raise ModelFileNotFound(
            f"a draft vocabulary of {size} tokens needs a head directory with {FILE_NAME}"
        )
    if vocabulary.vocab_size != head.target_vocab_size:
        raise UnsupportedModelError(
            f"{Path(directory) / FILE_NAME} ranks a vocabulary of {vocabulary.vocab_size} tokens, "
            f"the target has {head.target_vocab_size}"
        )
    if size != "default" and size >= head.target_vocab_size:
        return head
    return head.with_vocabulary(vocabulary.ids(None if size == "default" else size))
