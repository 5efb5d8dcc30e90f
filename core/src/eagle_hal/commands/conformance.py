"""``eagle-hal conformance --device D [--backend B] [--report FILE] [--areas A,B]``.

Runs the conformance suite (``eagle_hal.conformance``) in this process against the backend
the registry selects for ``--device`` (or the one forced by ``--backend``), prints the
per-area table and, with ``--report``, writes the JSON report to FILE and the Markdown
table beside it (FILE with suffix ``.md``). Exit status 0 only if no check failed and no
declared known failure passed unexpectedly. The suite runs on pytest (the ``conformance``
extra: ``pip install "eagle-hal[conformance]"``); without it the command says so in one
line and exits 1.
"""

from __future__ import annotations

import argparse
import sys

__all__ = ["PYTEST_MISSING", "add_arguments", "run"]

# The suite is a pytest plugin run in this process; pytest is an optional dependency.
PYTEST_MISSING = (
    "eagle-hal conformance: the conformance suite runs on pytest, which is not installed: "
    'pip install "eagle-hal[conformance]"'
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from eagle_hal.conformance import AREAS

    parser.add_argument("--device", required=True,
                        help="device string: cpu, cuda:0, npu, xpu:1, ...")
    parser.add_argument("--backend", default=None, help="force the backend by name")
    parser.add_argument(
        "--plugin", default=None, metavar="MODULE",
        help="take the backend from this plugin module instead of installed entry points",
    )
    parser.add_argument("--report", default=None, metavar="FILE", help="write the JSON report here")
    parser.add_argument(
        "--areas", default=None, metavar="AREA[,AREA...]",
        help=f"run only these areas (default all: {','.join(AREAS)})",
    )
    parser.add_argument("-v", "--verbose", action="store_true",
                        help="show pytest's per-check output")


def run(args: argparse.Namespace) -> int:
    try:
        from eagle_hal.conformance.runner import SuiteDidNotRun, run_suite
    except ModuleNotFoundError as exc:
        if exc.name != "pytest":
            raise
        print(PYTEST_MISSING, file=sys.stderr)
        return 1

    from eagle_hal.conformance import AREAS
    from eagle_hal.errors import InvalidArgument

    areas = [a.strip() for a in args.areas.split(",") if a.strip()] if args.areas else None
    if areas is not None and (not areas or set(areas) - set(AREAS)):
        raise InvalidArgument("--areas", args.areas, f"a comma-separated subset of "
                                                     f"{','.join(AREAS)}")
    if args.report:
        _check_report_path(args.report)
    if args.plugin is None:
        # the device and backend checked before pytest starts, so that a bad device string
        # or a missing backend is one typed error (exit status 2 or 3), not a failed session
        from eagle_hal.registry import select_backend

        select_backend(args.device, backend=args.backend)
    try:
        report = run_suite(
            args.device, args.backend, plugin_module=args.plugin, areas=areas,
            report_path=args.report, quiet=not args.verbose,
        )
    except SuiteDidNotRun as exc:
        print(f"eagle-hal conformance: error: {exc}", file=sys.stderr)
        return 2
    if args.report:
        print(f"\nreport written to {args.report}")
    return 1 if report.failed else 0


def _check_report_path(report: str) -> None:
    """``InvalidArgument`` for a ``--report`` that could not be written: its folder does not
    exist, or the path is a folder."""
    from pathlib import Path

    from eagle_hal.errors import InvalidArgument

    path = Path(report)
    if path.is_dir():
        raise InvalidArgument("--report", report, "a file path, not a folder")
    if not path.parent.is_dir():
        raise InvalidArgument("--report", report, "a file in a folder that exists")
