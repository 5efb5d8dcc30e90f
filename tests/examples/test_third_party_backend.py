"""End to end: examples/third-party-backend installed into a fresh environment.

The example is copied, then installed with pip into a new virtual environment that sees
this environment's packages (torch, eagle-hal and its backends) through a ``.pth`` file,
exactly as a user would install a vendor's plugin next to eagle-hal. Discovery, listing
and selection are then checked in that environment's own interpreter.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sysconfig
import venv
from importlib import metadata
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "third-party-backend"

_SELECT = """
import json, eagle_hal
chosen = eagle_hal.select_backend("cpu", backend="example")
default = eagle_hal.select_backend("cpu")
print(json.dumps({
    "forced": [chosen.name, type(chosen).__module__, str(chosen.torch_device)],
    "default": default.name,
    "tree_mask_modes": list(chosen.capabilities.tree_mask_modes),
}))
"""


def _run(python: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("EAGLE_HAL_", "PYTHON"))}
    result = subprocess.run(
        [str(python), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result


@pytest.fixture(scope="module")
def example_env(tmp_path_factory) -> Path:
    """A fresh venv with the example plugin installed by pip; returns its python."""
    with pytest.raises(metadata.PackageNotFoundError):
        metadata.distribution("eagle-hal-example-backend")  # not installed in the test env
    root = tmp_path_factory.mktemp("third_party")
    ignore = shutil.ignore_patterns("build", "*.egg-info")
    source = shutil.copytree(EXAMPLE, root / "src", ignore=ignore)
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env_dir)
    python = env_dir / "bin" / "python"
    own_site = Path(
        _run(
            python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"
        ).stdout.strip()
    )
    # See this environment's packages (and their .pth files, which addsitedir processes).
    parent_site = sysconfig.get_paths()["purelib"]
    (own_site / "_parent_env.pth").write_text(f"import site; site.addsitedir({parent_site!r})\n")
    _run(
        python,
        "-m",
        "pip",
        "install",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "--no-index",
        str(source),
    )
    return python


def test_example_is_discovered_and_listed(example_env):
    """`eagle-hal backends --json` in the new environment lists the example from its dist."""
    listed = {
        e["name"]: e
        for e in json.loads(_run(example_env, "-m", "eagle_hal.cli", "backends", "--json").stdout)
    }
    example = listed["example"]
    assert example["distribution"] == "eagle-hal-example-backend"
    assert example["version"] == "0.1.0" and example["api_version"] == "1.0"
    assert example["available"] is True and example["device_types"] == ["cpu"]
    assert example["capabilities"]["tree_mask_modes"] == ["tree_block"]
    assert listed["cpu"]["available"] is True


def test_example_is_selectable_by_name_only(example_env):
    """backend='example' selects it; plain 'cpu' still gets core's higher-priority cpu."""
    report = json.loads(_run(example_env, "-c", _SELECT).stdout)
    assert report["forced"] == ["example", "eagle_hal_example.backend", "cpu"]
    assert report["default"] == "cpu"
    assert report["tree_mask_modes"] == ["tree_block"]
