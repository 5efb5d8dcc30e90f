"""``eagle-hal train-draft``'s training stage: its arguments, their checks, and the run
(features, the head's loss, validations, checkpoints; ``eagle_hal.train``)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from eagle_hal.errors import InvalidArgument
from eagle_hal.validation import arg_type, check_float, check_int, check_positive_int

__all__ = ["TRAIN_ONLY", "add_arguments", "check_arguments", "train"]

# The flags' types (``eagle_hal.validation``): a bad value is a usage error naming the flag.
POSITIVE = arg_type(check_positive_int)
SEED = arg_type(check_int, high=2**63 - 1)
POSITIVE_FLOAT = arg_type(check_float, float, low=0.0, low_open=True)
NON_NEGATIVE_FLOAT = arg_type(check_float, float, low=0.0)
FRACTION = arg_type(check_float, float, low=0.0, high=1.0)

# settings only the training stage reads: left out of a --stage data command line, whose
# recorded command would otherwise name a head shape and loss the data never saw
TRAIN_ONLY = frozenset({
    "variant", "draft_layers", "draft_intermediate_size", "steps", "batch_size", "lr",
    "warmup_fraction", "feature_noise", "regression_weight", "cross_entropy_weight",
    "unroll_steps", "unroll_decay", "validate_every", "validation_prompts",
    "validation_new_tokens",
})


def _say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The "training" argument group of the command's parser."""
    train = parser.add_argument_group("training")
    train.add_argument(
        "--variant",
        choices=["eagle1", "eagle3"],
        default="eagle1",
        help="the head trained: eagle1 (the target's final feature, its lm_head) or eagle3 "
        "(fc over 3 target layers' streams, its own norm and lm_head, cross-entropy alone)",
    )
    train.add_argument(
        "--draft-layers",
        type=POSITIVE,
        default=1,
        help="eagle1: decoder layers in the head (1, EAGLE-1's; more are stacked pre-norm "
        "layers, each its own draft KV layer)",
    )
    train.add_argument(
        "--draft-intermediate-size",
        type=POSITIVE,
        default=None,
        help="eagle1: the head's MLP width (default: the target's)",
    )
    train.add_argument("--steps", type=POSITIVE, default=3000)
    train.add_argument("--batch-size", type=POSITIVE, default=32, help="sequences per step")
    train.add_argument("--lr", type=POSITIVE_FLOAT, default=5e-4)
    train.add_argument("--warmup-fraction", type=FRACTION, default=0.05)
    train.add_argument(
        "--feature-noise",
        type=NON_NEGATIVE_FLOAT,
        default=0.1,
        help="uniform half-width, x the input features' RMS (eagle3: of fc's output)",
    )
    train.add_argument(
        "--regression-weight",
        type=NON_NEGATIVE_FLOAT,
        default=None,
        help="weight of the smooth-L1 feature regression (0: cross-entropy only; default: "
        "the variant's, eagle1 1.0, eagle3 0, which it must stay)",
    )
    train.add_argument(
        "--cross-entropy-weight",
        type=NON_NEGATIVE_FLOAT,
        default=None,
        help="weight of the soft cross-entropy (default: the variant's, eagle1 0.1, eagle3 1.0)",
    )
    train.add_argument(
        "--unroll-steps",
        type=POSITIVE,
        default=1,
        help="draft steps trained per position, later ones reading the head's own output "
        "as a chain does at inference (1: the one-step EAGLE-1 loss)",
    )
    train.add_argument(
        "--unroll-decay",
        type=NON_NEGATIVE_FLOAT,
        default=1.0,
        help="loss weight of unroll step s: DECAY ** (s - 1)",
    )
    train.add_argument("--validate-every", type=POSITIVE, default=500)
    train.add_argument("--validation-prompts", type=POSITIVE, default=16)
    train.add_argument("--validation-new-tokens", type=POSITIVE, default=128)


def check_arguments(args: argparse.Namespace) -> None:
    """Fill the loss weights not given with the variant's defaults (so the recorded command
    spells them out) and refuse bad ones before anything loads."""
    from eagle_hal.train.variants import head_variant

    variant = head_variant(args.variant)
    if args.regression_weight is None:
        args.regression_weight = variant.default_regression_weight
    if args.cross_entropy_weight is None:
        args.cross_entropy_weight = variant.default_cross_entropy_weight
    if (
        min(args.regression_weight, args.cross_entropy_weight) < 0
        or args.regression_weight == args.cross_entropy_weight == 0
    ):
        raise InvalidArgument(
            "--regression-weight/--cross-entropy-weight",
            (args.regression_weight, args.cross_entropy_weight), "both >= 0 and not both 0")
    try:
        variant.check_shape(args.draft_layers, args.draft_intermediate_size)
    except ValueError as exc:
        given = f"--variant {variant.name} --draft-layers {args.draft_layers}"
        if args.draft_intermediate_size is not None:
            given += f" --draft-intermediate-size {args.draft_intermediate_size}"
        raise InvalidArgument("--draft-layers", given, str(exc)) from None
    if args.regression_weight > 0 and not variant.regresses_features:
        raise InvalidArgument(
            "--regression-weight", args.regression_weight,
            f"0 or nothing: --variant {variant.name} trains on the distribution alone (its "
            "output is not in the target's feature space)")


def train(
    args: argparse.Namespace,
    backend: Any,
    target: Any,
    dataset: Any,
    command: str,
    budget: float | None,
    started: float,
    progress: bool,
) -> None:
    """Train a ``--variant`` head on ``dataset`` within ``budget`` seconds (if any), saving
    it with its recipe to ``--out`` at every validation and at the end."""
    from eagle_hal.train.checkpoint import TrainingRecipe, save_trained_head
    from eagle_hal.train.recipe import TrainConfig
    from eagle_hal.train.trainer import train_head

    config = TrainConfig(
        variant=args.variant,
        draft_layers=args.draft_layers,
        draft_intermediate_size=args.draft_intermediate_size,
        steps=args.steps,
        batch_size=args.batch_size,
        lr=args.lr,
        warmup_fraction=args.warmup_fraction,
        feature_noise=args.feature_noise,
        regression_weight=args.regression_weight,
        cross_entropy_weight=args.cross_entropy_weight,
        unroll_steps=args.unroll_steps,
        unroll_decay=args.unroll_decay,
        seed=args.seed,
        validate_every=args.validate_every,
        validation_prompts=args.validation_prompts,
        validation_new_tokens=args.validation_new_tokens,
        time_budget_s=budget,
    )

    def checkpoint(state: Any) -> None:
        recipe = TrainingRecipe.of(
            dataset,
            config,
            steps=state.step,
            noise_half_width=state.feature_noise_half_width,
            losses=(state.first_loss, state.last_loss),
            validations=state.validations,
            command=command,
            wall_seconds=time.perf_counter() - started,
        )
        save_trained_head(state.head, target, args.out, recipe)

    unroll = config.unroll_steps
    unrolled = f", unrolled over {unroll} draft steps" if unroll > 1 else ""
    _say(
        f"training an {config.variant} head on {len(dataset.train_indices())} sequences, "
        f"validating on {len(dataset.validation_indices())}; {config.steps} steps of "
        f"{config.batch_size}{unrolled}"
    )
    result = train_head(
        backend, target, dataset, config, on_validation=checkpoint, progress=progress
    )
    final = result.validations[-1]
    _say(
        f"trained {result.steps} steps in {result.seconds:.0f} s: loss {result.first_loss:.4f} -> "
        f"{result.last_loss:.4f}; validation top-1 {final.top1_accuracy:.3f}, accept length "
        f"{final.accept_length:.2f}; head -> {args.out} "
        f"({time.perf_counter() - started:.0f} s in all)"
    )
