"""Shared fixtures for tests/core.

``fake_dists`` builds installed-looking distributions in a temporary directory (a
``name-version.dist-info`` with METADATA and entry_points.txt, plus plugin modules), so
that registry tests exercise discovery for real through ``importlib.metadata``.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path

import pytest

_IMPLEMENTATION = """
from eagle_hal.backend import Backend, Capabilities


class FakeBackend(Backend):
    @property
    def capabilities(self):
        return Capabilities()

    @property
    def torch_device(self):
        import torch

        return torch.device(self.device_spec.torch_device_string)

    def create_attention_backend(self, config):
        raise NotImplementedError("a registry test double")
"""


class FakeDists:
    """A directory of fake installed distributions, on ``sys.path`` for one test."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.prefix = f"fakeplug_{uuid.uuid4().hex[:8]}"
        self.modules: list[str] = []

    def _taken(self, stem: str) -> bool:
        return self.module_name(stem) in self.modules

    def module_name(self, stem: str) -> str:
        return f"{self.prefix}_{stem}"

    def write_module(self, stem: str, source: str) -> str:
        name = self.module_name(stem)
        (self.root / f"{name}.py").write_text(textwrap.dedent(source))
        self.modules.append(name)
        return name

    def add_dist(self, dist: str, version: str, entry_points: dict[str, str]) -> None:
        """A dist-info declaring ``entry_points`` (ep name -> module) in eagle_hal.backends."""
        info = self.root / f"{dist.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
        lines = ["[eagle_hal.backends]"] + [f"{ep} = {mod}" for ep, mod in entry_points.items()]
        (info / "entry_points.txt").write_text("\n".join(lines) + "\n")

    def add_backend(
        self,
        name: str,
        *,
        dist: str | None = None,
        version: str = "1.0",
        device_types: tuple[str, ...] = ("cpu",),
        priority: int = 0,
        api_version: tuple[int, int] | None = None,
        available_env: str | None = None,
        import_error: str | None = None,
        probe_error: str | None = None,
        implementation: str | None = None,
    ) -> str:
        """One distribution with one plugin module declaring backend ``name``.

        The probe is available unless ``available_env`` names an environment variable,
        in which case it is available exactly when that variable is "1". Returns the
        plugin module's name. The probe counts its calls in ``PROBE_CALLS``.
        """
        if implementation is None:
            implementation = f"{self.write_module(f'{name}_impl', _IMPLEMENTATION)}:FakeBackend"
        api = "API_VERSION" if api_version is None else repr(tuple(api_version))
        availability = (
            "Availability.available('fake: always available')"
            if available_env is None
            else (
                f"(Availability.available('fake: {available_env}=1') "
                f"if os.environ.get({available_env!r}) == '1' "
                f"else Availability.unavailable('fake: {available_env} is not 1'))"
            )
        )
        source = f"""
            import os
            from eagle_hal.backend import API_VERSION, Availability, BackendDescriptor
            from eagle_hal.hookspecs import hookimpl

            PROBE_CALLS = 0
            {"raise ImportError(" + repr(import_error) + ")" if import_error else ""}

            def probe():
                global PROBE_CALLS
                PROBE_CALLS += 1
                {"raise RuntimeError(" + repr(probe_error) + ")" if probe_error else ""}
                return {availability}

            @hookimpl
            def eagle_hal_backends():
                return [BackendDescriptor(
                    name={name!r}, device_types={tuple(device_types)!r},
                    implementation={implementation!r}, probe=probe,
                    api_version={api}, priority={priority},
                )]
        """
        stem = f"{name}_{len(self.modules)}" if self._taken(name) else name
        module = self.write_module(stem, source)
        self.add_dist(dist or f"fake-{name}", version, {name: module})
        return module

    def registry(self, **kwargs):
        """A registry that sees only these fake distributions; ``environ`` defaults to {}."""
        from eagle_hal.registry import Registry

        kwargs.setdefault("environ", {})
        return Registry(path=[str(self.root)], **kwargs)


@pytest.fixture
def fake_dists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A ``FakeDists`` whose directory is on ``sys.path`` for this test only."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    dists = FakeDists(root)
    yield dists
    for name in dists.modules:
        sys.modules.pop(name, None)
