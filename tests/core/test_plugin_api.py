"""Backend packages import eagle-hal only through ``eagle_hal.plugin_api``, and every name
that module exports resolves.

The imports are read with ``ast``: module level, inside functions and under
``if TYPE_CHECKING:`` alike, so that a plugin never depends on where the core keeps a name.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PLUGIN_ROOTS = [*sorted((REPO / "backends").glob("*/src")),
                REPO / "examples" / "third-party-backend"]
PLUGIN_SOURCES = sorted(
    path
    for root in PLUGIN_ROOTS
    for path in root.rglob("*.py")
    if "build" not in path.relative_to(root).parts
)


def core_imports(source: str) -> list[tuple[int, str]]:
    """(line, module) for every import of an ``eagle_hal`` module (``eagle_hal`` itself
    included; vendor packages such as ``eagle_hal_cuda`` are not the core)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found += [(node.lineno, name) for name in names
                  if name == "eagle_hal" or name.startswith("eagle_hal.")]
    return found


def test_plugin_sources_are_found():
    packages = {path.relative_to(REPO).parts[1] for path in PLUGIN_SOURCES}
    assert {"cuda", "rocm", "npu", "xpu", "musa", "third-party-backend"} <= packages


def test_plugins_import_only_the_plugin_api():
    offending = [
        f"{path.relative_to(REPO)}:{line}: {module}"
        for path in PLUGIN_SOURCES
        for line, module in core_imports(path.read_text(encoding="utf-8"))
        if module != "eagle_hal.plugin_api"
    ]
    assert offending == [], "import these through eagle_hal.plugin_api:\n" + "\n".join(offending)


def test_scanner_counts_every_kind_of_import():
    source = (
        "from typing import TYPE_CHECKING\n"
        "import eagle_hal_cuda.plugin\n"
        "from eagle_hal.plugin_api import Backend\n"
        "from eagle_hal import settings\n"
        "if TYPE_CHECKING:\n"
        "    from eagle_hal.hal.attention import AttentionConfig\n"
        "def f():\n"
        "    import eagle_hal.ops.paging\n"
    )
    assert core_imports(source) == [
        (3, "eagle_hal.plugin_api"), (4, "eagle_hal"), (6, "eagle_hal.hal.attention"),
        (8, "eagle_hal.ops.paging"),
    ]


def test_every_exported_name_resolves():
    from eagle_hal import plugin_api

    pytest.importorskip("triton")  # the Triton ops are exported too
    assert len(plugin_api.__all__) == len(set(plugin_api.__all__))
    missing = [name for name in plugin_api.__all__ if getattr(plugin_api, name, None) is None]
    assert missing == []
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        plugin_api.nothing_here  # noqa: B018


def test_the_contract_names_are_the_core_objects():
    from eagle_hal import backend, hookspecs, plugin_api
    from eagle_hal.hal import attention, tree_mask

    assert plugin_api.Backend is backend.Backend
    assert plugin_api.TreeMaskMode is tree_mask.TreeMaskMode is backend.TreeMaskMode
    assert plugin_api.hookimpl is hookspecs.hookimpl
    assert plugin_api.ForwardBatch is attention.ForwardBatch


def test_importing_the_plugin_api_stays_light():
    """A plugin's light module takes the descriptor and the marker from the plugin API
    without importing torch."""
    code = (
        "import sys\n"
        "from eagle_hal.plugin_api import Availability, BackendDescriptor, Capabilities, "
        "TreeMaskMode, hookimpl\n"
        "print('torch' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"
