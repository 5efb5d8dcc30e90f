"""Shared fixtures for the vendor-backend tests: stand-ins for torch builds and extensions.

``fake_torch`` builds an object shaped like the parts of ``torch`` a probe reads (version
strings and a device namespace), so a probe can be judged against a CUDA, ROCm, XPU or
CPU-only build without one. ``fake_extension`` writes a real package on ``sys.path`` (for
instance a ``torch_npu`` whose import raises), so the import system itself is exercised.
``load_sibling_module`` loads a vendor op emulation kept beside its tests.
"""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest


def device_namespace(count: int = 0, error: Exception | None = None, compiled: bool = True):
    """A stand-in for ``torch.cuda`` / ``torch.xpu`` / a device module."""

    def is_available() -> bool:
        if error is not None:
            raise error
        return count > 0

    def device_count() -> int:
        if error is not None:
            raise error
        return count

    return SimpleNamespace(
        is_available=is_available, device_count=device_count, _is_compiled=lambda: compiled
    )


def fake_torch(version: str = "9.9.0", *, cuda=None, hip=None, devices=None, xpu=None):
    """An object shaped like torch for a probe: ``__version__``, ``version``, device modules."""
    return SimpleNamespace(
        __version__=version,
        version=SimpleNamespace(cuda=cuda, hip=hip),
        cuda=devices if devices is not None else device_namespace(0),
        xpu=xpu if xpu is not None else device_namespace(0, compiled=False),
    )


class FakeExtensions:
    """Writes packages into a directory that is on ``sys.path`` for one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.names: list[str] = []

    def add(self, name: str, source: str) -> Path:
        package = self.root / name
        package.mkdir()
        (package / "__init__.py").write_text(textwrap.dedent(source))
        self.names.append(name)
        return package


@pytest.fixture
def fake_extension(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A ``FakeExtensions`` on ``sys.path``; what it wrote is unimported afterwards."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    extensions = FakeExtensions(root)
    yield extensions
    for name in extensions.names:
        for module in [m for m in sys.modules if m == name or m.startswith(f"{name}.")]:
            del sys.modules[module]


@pytest.fixture
def stand_ins():
    """The builders above, for tests: ``stand_ins.torch(...)``, ``stand_ins.devices(...)``."""
    return SimpleNamespace(torch=fake_torch, devices=device_namespace)


def load_sibling_module(path: Path):
    """The Python file ``path`` as a module, loaded once (test directories are not
    packages), under a name made from its folder and file name."""
    name = f"eagle_hal_tests_{path.parent.name}_{path.stem}"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@pytest.fixture(scope="session")
def sibling_module():
    """``load_sibling_module``, for the vendor folders' conftests."""
    return load_sibling_module


@pytest.fixture(scope="session")
def paired_attention():
    """``paired_attention.py``: one paged KV state behind an adapter and the reference."""
    return load_sibling_module(Path(__file__).with_name("paired_attention.py"))
