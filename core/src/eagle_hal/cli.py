"""The ``eagle-hal`` command line: one subcommand per module under ``eagle_hal.commands``.

Each command module provides ``add_arguments(parser)`` and ``run(args) -> int``. Only the
module of the command being run is imported, so ``eagle-hal backends`` never pays for the
imports of ``generate``. Adding a command is one line in ``COMMANDS``.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = ["COMMANDS", "Command", "build_parser", "main"]


@dataclasses.dataclass(frozen=True, slots=True)
class Command:
    """A subcommand: its name, the module implementing it, and one line of help."""

    name: str
    module: str
    help: str


COMMANDS: tuple[Command, ...] = (
    Command("backends", "eagle_hal.commands.backends", "list backends, why each is (un)usable"),
    Command("generate", "eagle_hal.commands.generate",
            "generate text with EAGLE speculative decoding"),
    Command("bench", "eagle_hal.commands.bench", "benchmark plain vs speculative decoding"),
    Command("train-draft", "eagle_hal.commands.train_draft",
            "train an EAGLE draft head for a target"),
    Command("conformance", "eagle_hal.commands.conformance",
            "run the conformance suite on a backend"),
)


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the ``chosen`` command's module is imported to fill it."""
    from eagle_hal import __version__

    parser = argparse.ArgumentParser(
        prog="eagle-hal",
        description="EAGLE speculative decoding on any accelerator.",
    )
    parser.add_argument("--version", action="version", version=f"eagle-hal {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if command.name == chosen:
            module = importlib.import_module(command.module)
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``eagle-hal`` command; returns the process exit status.

    An ``EagleHalError`` (a user-facing problem such as an unavailable backend) is printed
    as one message on stderr with status 1 rather than as a traceback; with
    ``EAGLE_HAL_DEBUG=1`` it propagates, traceback and all.
    """
    from eagle_hal.errors import EagleHalError

    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((arg for arg in args_list if not arg.startswith("-")), None)
    args = build_parser(chosen).parse_args(args_list)
    try:
        return int(args.run(args) or 0)
    except EagleHalError as exc:
        if _debugging():
            raise
        print(f"eagle-hal {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader (`| head`) went away; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


def _debugging() -> bool:
    """Whether ``EAGLE_HAL_DEBUG`` asks for tracebacks; a value it does not allow is
    reported (one line) and counts as off, so that the error being reported still is."""
    from eagle_hal import settings
    from eagle_hal.errors import InvalidSetting

    try:
        return bool(settings.get("EAGLE_HAL_DEBUG"))
    except InvalidSetting as bad:
        print(f"eagle-hal: {bad}", file=sys.stderr)
        return False


if __name__ == "__main__":
    sys.exit(main())
