"""``eagle-hal backends [--json]``: every discovered backend, its availability and why.

Probes every backend (which imports torch and, where installed, each vendor's library).
The JSON form is a list of objects with the keys ``name``, ``distribution``, ``version``,
``device_types``, ``api_version`` (``"major.minor"`` or null), ``available``, ``status``
(``available``, ``unavailable``: its probe says it cannot run here, ``load_error``: its
plugin failed to import, register, probe or match this HAL's API version, ``blocked``:
left out by ``EAGLE_HAL_DISABLE`` or ``EAGLE_HAL_PLUGINS``, ``conflict``: another
distribution registers the same name), ``reason`` and ``capabilities`` (an object, or null
when the plugin could not declare any).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence

from eagle_hal.backend import Capabilities
from eagle_hal.registry import BackendInfo, list_backends

__all__ = ["add_arguments", "format_table", "run"]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print a JSON list instead of tables")


def run(args: argparse.Namespace) -> int:
    infos = list_backends()
    if args.json:
        print(json.dumps([info.to_json() for info in infos], indent=2))
    else:
        print(format_table(infos))
    return 0


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _page_sizes(caps: Capabilities) -> str:
    if caps.page_sizes:
        return ",".join(str(size) for size in caps.page_sizes)
    return "any" if caps.page_size_multiple == 1 else f"multiple of {caps.page_size_multiple}"


def _yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def format_table(infos: Sequence[BackendInfo]) -> str:
    """Two readable tables: availability with reasons, then capabilities."""
    if not infos:
        return "no backends found: install eagle-hal (it ships the cpu backend) or a plugin"
    status_rows = [
        [
            info.name,
            info.distribution,
            info.version,
            ",".join(info.device_types) or "-",
            "-" if info.api_version is None else "{}.{}".format(*info.api_version),
            info.status.value,
            info.reason,
        ]
        for info in infos
    ]
    lines = _table(
        ["NAME", "DISTRIBUTION", "VERSION", "DEVICES", "API", "STATUS", "REASON"], status_rows
    )
    capability_rows = [
        [
            info.name,
            _yes_no(caps.graph_capture),
            ",".join(caps.dtypes),
            ",".join(caps.tree_mask_modes),
            _page_sizes(caps),
            _yes_no(caps.triton),
            caps.distributed_backend,
            caps.visible_devices_env or "-",
        ]
        for info in infos
        if (caps := info.capabilities) is not None
    ]
    if capability_rows:
        header = [
            "NAME",
            "GRAPHS",
            "DTYPES",
            "TREE MASKS",
            "PAGE SIZES",
            "TRITON",
            "COLLECTIVE",
            "VISIBLE DEVICES VAR",
        ]
        lines += ["", "Capabilities", *_table(header, capability_rows)]
    return "\n".join(lines)
