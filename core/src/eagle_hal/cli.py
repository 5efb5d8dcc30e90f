"""The ``eagle-hal`` command line: one subcommand per module under ``eagle_hal.commands``.

Each command module provides ``add_arguments(parser)`` and ``run(args) -> int``. Only the
module of the command being run is imported, so ``eagle-hal backends`` never pays for the
imports of ``generate``. Adding a command is one line in ``COMMANDS``.

Errors are one line on stderr, ``eagle-hal COMMAND: error: TYPE: MESSAGE``, and no
traceback unless ``--debug`` or ``EAGLE_HAL_DEBUG=1`` asks for one. The exit status says
which kind of error it was (``exit_status``, the table README.md documents)::

    0  success
    1  anything else: a failed run or check, a bug
    2  invalid arguments, and input files that cannot be read or hold nothing usable:
       prompt sets, models and heads missing, corrupt or not loadable (ModelLoadError)
       (argparse's usage errors exit 2 too)
    3  no usable backend: BackendUnavailable, PluginLoadError and its subclasses
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import os
import sys
from collections.abc import Sequence

__all__ = [
    "COMMANDS",
    "EXIT_BACKEND",
    "EXIT_FAILURE",
    "EXIT_USAGE",
    "Command",
    "build_parser",
    "exit_status",
    "main",
]

EXIT_FAILURE = 1
EXIT_USAGE = 2  # what argparse exits with for a usage error
EXIT_BACKEND = 3


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
    Command("serve", "eagle_hal.commands.serve", "serve an OpenAI-compatible HTTP API"),
    Command("train-draft", "eagle_hal.commands.train_draft",
            "train an EAGLE draft head for a target"),
    Command("conformance", "eagle_hal.commands.conformance",
            "run the conformance suite on a backend"),
)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, reporting a usage error in one line (flag, value, what is
    allowed) rather than the whole usage text first; ``--help`` still shows it."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The argument parser; only the ``chosen`` command's module is imported to fill it."""
    from eagle_hal import __version__

    parser = _Parser(
        prog="eagle-hal",
        description="EAGLE speculative decoding on any accelerator.",
    )
    parser.add_argument("--version", action="version", version=f"eagle-hal {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help="show a traceback for errors (as EAGLE_HAL_DEBUG=1 does)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for command in COMMANDS:
        sub = commands.add_parser(command.name, help=command.help, description=command.help)
        if command.name == chosen:
            module = importlib.import_module(command.module)
            module.add_arguments(sub)
            sub.set_defaults(run=module.run)
    return parser


def exit_status(error: BaseException) -> int:
    """The exit status of a command that raised ``error`` (see the module's table)."""
    from eagle_hal.errors import BackendUnavailable, EagleHalError
    from eagle_hal.model.errors import ModelLoadError

    if isinstance(error, BackendUnavailable):
        return EXIT_BACKEND
    # the ValueError members of the family are bad values: arguments, settings, device
    # strings, prompt sets, config files; a model or head file that is missing, corrupt
    # or not one eagle-hal loads is bad input as well
    if isinstance(error, EagleHalError) and isinstance(error, ValueError | ModelLoadError):
        return EXIT_USAGE
    return EXIT_FAILURE


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``eagle-hal`` command; returns the process exit status (``exit_status``).

    An error is printed as one line on stderr rather than as a traceback; with ``--debug``
    or ``EAGLE_HAL_DEBUG=1`` it propagates, traceback and all.
    """
    from eagle_hal.errors import EagleHalError

    args_list = list(sys.argv[1:] if argv is None else argv)
    chosen = next((arg for arg in args_list if not arg.startswith("-")), None)
    try:
        args = build_parser(chosen).parse_args(args_list)
    except SystemExit as done:  # argparse printed the usage error (or --help, --version)
        return done.code if isinstance(done.code, int) else EXIT_USAGE
    try:
        return int(args.run(args) or 0)
    except BrokenPipeError:  # the reader (`| head`) went away; not an error of ours
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except Exception as exc:
        if args.debug or _debugging():
            raise
        what = type(exc).__name__
        if not isinstance(exc, EagleHalError):
            what = f"internal error: {what}"
        hint = "" if isinstance(exc, EagleHalError) else " (--debug shows the traceback)"
        # one line: a message listing candidates line by line is joined with "; "
        message = "; ".join(line.strip() for line in str(exc).splitlines() if line.strip())
        message = message.replace(":; ", ": ")
        print(f"eagle-hal {args.command}: error: {what}: {message}{hint}", file=sys.stderr)
        return exit_status(exc)
    except KeyboardInterrupt:
        print(f"eagle-hal {args.command}: interrupted", file=sys.stderr)
        return 130


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
