"""``eagle-hal train-draft``: train an EAGLE draft head for a target, from the target alone.

Two stages, each resumable on its own (one device command may be time-limited):

* ``--stage data``: the target writes user prompts and answers them (Magpie-style
  self-distillation, ``eagle_hal.train.selfdistill``); the token sequences go to ``--data``
  (safetensors; default ``OUT.data.safetensors``, beside the head directory).
* ``--stage train``: features from the target, then the head's loss (``--variant``:
  ``eagle1``, the default, or ``eagle3``; ``--unroll-steps N``: unrolled over N draft steps,
  as a chain drafts at inference; ``--draft-layers``, ``--draft-intermediate-size``:
  an EAGLE-1 head of stacked layers, narrower MLPs); the head is saved to ``--out`` at
  every validation and at the end (the variant's published layout, bf16, with the recipe
  in ``config.json``).
  Both variants train on the same data file.

``--stage all`` (the default) runs both. ``--time-budget-min`` bounds the whole command:
under ``all``, data generation gets 45% of it and training what is left. Training ends by
ranking the tokens of the training answers into ``OUT/draft_vocab.json``
(``eagle_hal.model.draft_vocab``); ``--stage vocab`` does only that, for a head trained
before the ranking existed.
"""

from __future__ import annotations

import argparse
import math
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from eagle_hal.commands import train_draft_head as head_stage
from eagle_hal.commands import train_draft_vocab as vocabulary
from eagle_hal.commands.bench_prompts import DatasetError
from eagle_hal.commands.train_draft_head import POSITIVE, SEED
from eagle_hal.errors import InvalidArgument
from eagle_hal.validation import arg_type, check_float

__all__ = ["add_arguments", "run"]

FRACTION_OPEN = arg_type(check_float, float, low=0.0, high=1.0, low_open=True, high_open=True)

_DATA_SHARE = 0.45  # of the time budget, under --stage all


# settings only the data stage reads: left out of a --stage train command line
_DATA_ONLY = frozenset({
    "num_prompts", "max_prompt_tokens", "max_new_tokens", "gen_batch_size", "data_workers",
    "validation_fraction", "prompt_openers", "prompt_temperatures", "answer_temperatures",
})


def _floats(text: str) -> tuple[float, ...]:
    try:
        values = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected comma-separated numbers, got {text!r}") from None
    if not values or not all(math.isfinite(v) and v >= 0 for v in values):
        raise argparse.ArgumentTypeError(
            f"expected one or more finite temperatures >= 0, got {text!r}"
        )
    return values


def _openers(spec: str) -> tuple[str, ...]:
    from eagle_hal.train.openers import OPENER_SETS

    if spec in OPENER_SETS:
        return OPENER_SETS[spec]
    path = Path(spec)
    if not path.is_file():
        names = ", ".join(repr(name) for name in OPENER_SETS)
        raise InvalidArgument("--prompt-openers", spec, f"one of {names} or a readable file")
    # a literal \n in a line is a line break of the opener ("Here is a review:\n\n" makes
    # the target write the passage itself, then the request is about it)
    openers = tuple(line.strip().replace("\\n", "\n")
                    for line in path.read_text(encoding="utf-8-sig").splitlines())
    if not openers:
        raise DatasetError(f"--prompt-openers: {spec} holds no line ('none' for free prompts)")
    return openers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where")
    where.add_argument(
        "--device", default="auto", help='device string: "cpu", "cuda:0", "npu", "auto"'
    )
    where.add_argument("--backend", default=None, help="force a backend by name")
    where.add_argument(
        "--dtype",
        default=None,
        choices=["float32", "bfloat16", "float16"],
        help="target dtype (default: bfloat16 on accelerators, float32 on the CPU)",
    )
    what = parser.add_argument_group("what")
    what.add_argument(
        "--model",
        default=None,
        help="target: HF directory or GGUF file (default: SmolLM2-135M-Instruct)",
    )
    what.add_argument("--out", type=Path, default=None, help="directory the head is written to")
    what.add_argument(
        "--data",
        type=Path,
        default=None,
        help="data set file (default: OUT.data.safetensors, next to the head directory)",
    )
    what.add_argument("--stage", choices=["data", "train", "all", "vocab"], default="all")
    what.add_argument("--seed", type=SEED, default=0)
    what.add_argument(
        "--time-budget-min", type=float, default=None, help="wall-time budget of this command"
    )
    what.add_argument("--no-progress", action="store_true", help="no progress bars")
    vocabulary.add_arguments(what)
    data = parser.add_argument_group("data (self-distillation)")
    data.add_argument("--num-prompts", type=POSITIVE, default=3000)
    data.add_argument("--max-prompt-tokens", type=POSITIVE, default=96)
    data.add_argument("--max-new-tokens", type=POSITIVE, default=256)
    data.add_argument("--gen-batch-size", type=POSITIVE, default=128,
                      help="requests decoded together")
    data.add_argument(
        "--data-workers",
        type=POSITIVE,
        default=1,
        help="processes that generate on the one device, each with --gen-batch-size requests "
        "(at large batches the host's per-request work bounds a process: train.distill_workers)",
    )
    data.add_argument("--validation-fraction", type=FRACTION_OPEN, default=0.05,
                      help="share of prompts held out, in (0, 1)")
    data.add_argument(
        "--prompt-openers",
        default="broad",
        help="openers that steer the kind of user prompt the target writes: 'broad' (the "
        "default: many kinds of request, train.openers.BROAD_PROMPT_OPENERS), "
        "'broad-passages' (those, then requests about a passage the target writes first: "
        "the shipped head's data), 'builtin' (a shorter list), 'none' (free prompts only), "
        "or a UTF-8 text file with one opener a line (an empty line = a free prompt; \\n "
        "= a line break within the opener)",
    )
    data.add_argument(
        "--prompt-temperatures",
        type=_floats,
        default=(0.8, 1.0, 1.2),
        help="comma-separated temperatures the user prompts cycle through",
    )
    data.add_argument(
        "--answer-temperatures",
        type=_floats,
        default=(0.0, 0.0, 0.5, 0.8),
        help="comma-separated temperatures the answers cycle through (0 = greedy)",
    )
    head_stage.add_arguments(parser)


def _command_line(args: argparse.Namespace) -> str:
    """The command, with every setting spelled out, that reproduces this run (files by
    their names: ``train.dataset.command_with_file_names``)."""
    from eagle_hal.train.dataset import command_with_file_names

    words = ["eagle-hal", "train-draft"]
    skip = {"run", "command", "no_progress"}
    if args.stage == "train":  # the data stage's settings do not apply
        skip |= _DATA_ONLY
    elif args.stage == "data":  # nor the training stage's
        skip |= head_stage.TRAIN_ONLY
    for key, value in sorted(vars(args).items()):
        if key in skip or value is None or value is False:
            continue
        flag = "--" + key.replace("_", "-")
        if isinstance(value, tuple):
            value = ",".join(repr(v) for v in value)
        words += [flag] if value is True else [flag, str(value)]
    return command_with_file_names(shlex.join(words))


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    from eagle_hal.model.loading import default_model_path, load_target
    from eagle_hal.registry import select_backend
    from eagle_hal.train.dataset import DistillDataset, file_sha256

    started = time.perf_counter()
    if args.data is None and args.out is None:
        raise InvalidArgument("--out", None, "a head directory (and/or --data for the data set "
                              "file)")
    # Next to the head, not inside it: the head directory may become package data.
    data_path: Path = args.data or args.out.with_name(args.out.name + ".data.safetensors")
    vocabulary.check_arguments(args)
    if args.data_workers < 1:
        raise InvalidArgument("--data-workers", args.data_workers, "an integer >= 1")
    if args.stage == "vocab":
        paths = args.vocab_data or [data_path]
        if not args.vocab_data and args.data is None and not data_path.is_file():
            return vocabulary.resize(args)  # no data here: re-size the head's own ranking
        return vocabulary.rank(args, [DistillDataset.load(p) for p in paths], paths, None)
    if args.stage != "data" and args.out is None:
        raise InvalidArgument("--out", None, f"a head directory: --stage {args.stage} trains "
                              "a head")
    head_stage.check_arguments(args)
    budget = None if args.time_budget_min is None else 60.0 * args.time_budget_min
    progress = not args.no_progress
    command = _command_line(args)
    openers = _openers(args.prompt_openers) if args.stage != "train" else ()  # before loading

    backend = select_backend(args.device, backend=args.backend)
    dtype = _dtype(args.dtype, backend)
    model_path = Path(args.model) if args.model else default_model_path()
    target, tokenizer = load_target(
        model_path, dtype=dtype, device=backend.torch_device, progress=progress
    )
    sha = file_sha256(model_path)
    where = f"{backend.name}:{backend.torch_device}"
    _say(f"target {model_path} (sha256 {sha[:12]}…) on {where}, {dtype}")

    if args.stage in ("data", "all"):
        data_budget = (
            None if budget is None else budget * (_DATA_SHARE if args.stage == "all" else 1.0)
        )
        dataset = _generate(
            args, backend, target, tokenizer, model_path, sha, command, data_budget, progress,
            openers,
        )
        dataset.save(data_path)
        seconds = max(dataset.info.generation_seconds, 1e-3)
        _say(
            f"data: {dataset.num_sequences} sequences "
            f"({len(dataset.validation_indices())} held out), {dataset.num_tokens} tokens "
            f"({dataset.num_answer_tokens} in answers) in {seconds:.0f} s "
            f"({dataset.num_tokens / seconds:.0f} tokens/s) -> {data_path}"
        )
        if args.stage == "data":
            return 0
    else:
        dataset = DistillDataset.load(data_path)
        if dataset.info.target_sha256 and dataset.info.target_sha256 != sha:
            _say(
                f"warning: {data_path} was generated by another target (sha256 "
                f"{dataset.info.target_sha256[:12]}…); training on it anyway"
            )
    remaining = None if budget is None else budget - (time.perf_counter() - started)
    head_stage.train(args, backend, target, dataset, command, remaining, started, progress)
    return vocabulary.rank(args, [dataset], [data_path], target.config.vocab_size)


def _dtype(name: str | None, backend: Any) -> Any:
    import torch

    if name is not None:
        return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
            name
        ]
    if backend.torch_device.type == "cpu" or "bfloat16" not in backend.capabilities.dtypes:
        return torch.float32
    return torch.bfloat16


def _generate(
    args: argparse.Namespace,
    backend: Any,
    target: Any,
    tokenizer: Any,
    model_path: Path,
    sha: str,
    command: str,
    budget: float | None,
    progress: bool,
    openers: tuple[str, ...],
) -> Any:
    from eagle_hal.train.dataset import file_name
    from eagle_hal.train.selfdistill import DistillConfig, generate_dataset

    config = DistillConfig(
        num_prompts=args.num_prompts,
        max_prompt_tokens=args.max_prompt_tokens,
        max_new_tokens=args.max_new_tokens,
        prompt_temperatures=args.prompt_temperatures,
        answer_temperatures=args.answer_temperatures,
        prompt_openers=openers,
        validation_fraction=args.validation_fraction,
        seed=args.seed,
        max_batch_size=args.gen_batch_size,
        time_budget_s=budget,
    )
    named = dict(target_name=file_name(model_path), target_sha256=sha, command=command,
                 progress=progress)
    if args.data_workers == 1:
        return generate_dataset(backend, target, tokenizer, config, **named)
    from eagle_hal.train.distill_workers import TargetSource, generate_dataset_in_workers

    source = TargetSource.of(model_path, backend, target.dtype)
    return generate_dataset_in_workers(
        backend, target, tokenizer, config, source, args.data_workers, **named
    )
