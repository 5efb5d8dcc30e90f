"""``eagle-hal train-draft``'s draft vocabulary: its arguments, their checks, and the ranking
written next to the head (``eagle_hal.model.draft_vocab``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from eagle_hal.commands.bench_prompts import DatasetError
from eagle_hal.errors import InvalidArgument
from eagle_hal.model.errors import ModelFileNotFound

__all__ = ["add_arguments", "check_arguments", "rank", "resize"]


def add_arguments(group: Any) -> None:
    """``--vocab-data`` and ``--draft-vocab-coverage``, in ``group`` of the command's parser."""
    group.add_argument(
        "--vocab-data", type=Path, action="append", default=None, metavar="FILE",
        help="--stage vocab: data set files whose training answers are counted (repeatable; "
        "default: --data)",
    )
    group.add_argument(
        "--draft-vocab-coverage", type=float, default=None,
        help="the draft vocabulary's default size keeps this share of the training answers' "
        "tokens (default 0.995); --stage vocab with no data file re-sizes the head's own "
        "draft_vocab.json from the counts it holds",
    )


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse bad vocabulary settings before anything loads or trains."""
    if args.draft_vocab_coverage is not None and not 0.0 < args.draft_vocab_coverage <= 1.0:
        raise InvalidArgument("--draft-vocab-coverage", args.draft_vocab_coverage,
                              "a fraction in (0, 1]")
    if args.vocab_data and args.stage != "vocab":
        raise InvalidArgument("--vocab-data", [str(p) for p in args.vocab_data],
                              "only with --stage vocab (training ranks its own data)")
    if args.stage == "vocab" and args.out is None:
        raise InvalidArgument("--out", None, "a head directory: --stage vocab writes "
                              "OUT/draft_vocab.json")


def rank(args: argparse.Namespace, datasets: list[Any], paths: list[Path],
         vocab_size: int | None) -> int:
    """Write ``OUT/draft_vocab.json``: the tokens of the data sets' training answers, most
    frequent first."""
    import json

    from eagle_hal.model.draft_vocab import DEFAULT_COVERAGE, DraftVocabulary, count_answer_tokens
    from eagle_hal.train.dataset import command_with_file_names

    if vocab_size is None:  # --stage vocab: the head's own config names the vocabulary
        config = args.out / "config.json"
        if not config.is_file():
            raise ModelFileNotFound(f"{config} does not exist; train the head first")
        vocab_size = int(json.loads(config.read_text())["vocab_size"])
    coverage = DEFAULT_COVERAGE if args.draft_vocab_coverage is None else args.draft_vocab_coverage
    try:
        counts = sum(count_answer_tokens(dataset, vocab_size) for dataset in datasets)
    except ValueError as exc:
        raise DatasetError(f"--data: {exc}") from exc
    source = {"data": [{"file": path.name, "command": command_with_file_names(dataset.info.command),
                        "target_sha256": dataset.info.target_sha256, "seed": dataset.info.seed,
                        "sequences_counted": len(dataset.train_indices())}
                       for path, dataset in zip(paths, datasets, strict=True)],
              "answer_tokens_counted": int(counts.sum()), "coverage": coverage}
    try:
        vocabulary = DraftVocabulary.from_counts(counts, coverage=coverage, source=source)
    except ValueError as exc:
        raise InvalidArgument("--draft-vocab-coverage", coverage, str(exc)) from exc
    path = vocabulary.save(args.out)
    print(
        f"draft vocabulary: {len(vocabulary.token_ids):,} of {vocab_size:,} tokens seen in "
        f"{int(counts.sum()):,} answer tokens; default {vocabulary.default_size:,} "
        f"(keeps {vocabulary.coverage(vocabulary.default_size):.3f}) -> {path}",
        file=sys.stderr, flush=True,
    )
    return 0


def resize(args: argparse.Namespace) -> int:
    """``--stage vocab`` where no data file is given or found: give ``OUT/draft_vocab.json``
    the default size ``--draft-vocab-coverage`` asks for, from the counts the file holds
    (the ranking and its source stay; the data it was counted on may be long gone)."""
    import torch

    from eagle_hal.model.draft_vocab import DraftVocabulary

    if args.draft_vocab_coverage is None:
        raise InvalidArgument("--vocab-data", None,
                              f"a data set to count ({args.out.name}.data.safetensors beside "
                              "the head, --data or --vocab-data), or --draft-vocab-coverage "
                              "to re-size the head's own draft_vocab.json")
    existing = DraftVocabulary.load(args.out)  # an UnsupportedModelError names the file
    if existing is None:
        raise ModelFileNotFound(f"{args.out} has no draft_vocab.json to re-size and no data "
                                "set to count")
    counts = torch.zeros(existing.vocab_size, dtype=torch.int64)
    counts[list(existing.token_ids)] = torch.tensor(existing.counts, dtype=torch.int64)
    coverage = args.draft_vocab_coverage
    vocabulary = DraftVocabulary.from_counts(
        counts, coverage=coverage, source=dict(existing.source, coverage=coverage))
    path = vocabulary.save(args.out)
    print(f"draft vocabulary: default {existing.default_size:,} -> {vocabulary.default_size:,} "
          f"tokens (keeps {vocabulary.coverage(vocabulary.default_size):.3f}) -> {path}",
          file=sys.stderr, flush=True)
    return 0
