"""Fixtures for the MUSA backend tests: the mate emulation, loaded by path and installed as
a fake ``mate`` module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_NAME = "eagle_hal_tests_musa_mate_emulation"


def load_emulation():
    """``tests/backends/musa/mate_emulation.py`` as a module (test directories are not
    packages)."""
    if _NAME not in sys.modules:
        path = Path(__file__).with_name("mate_emulation.py")
        spec = importlib.util.spec_from_file_location(_NAME, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


@pytest.fixture(scope="session")
def mate_emulation():
    """The emulation module (never the real mate)."""
    return load_emulation()


@pytest.fixture
def emulated_mate(monkeypatch, mate_emulation):
    """``sys.modules["mate"]`` replaced by the emulation and ``EAGLE_HAL_MUSA_MATE=1`` for
    one test; returns the fake module (its ``flash_attn_with_kvcache.calls`` record calls)."""
    module = mate_emulation.emulated_mate_module()
    monkeypatch.setitem(sys.modules, "mate", module)
    monkeypatch.setenv("EAGLE_HAL_MUSA_MATE", "1")
    return module
