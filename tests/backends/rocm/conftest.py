"""Fixtures for the ROCm backend tests: the aiter emulation, loaded by path and installed as
a fake ``aiter`` module."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_NAME = "eagle_hal_tests_rocm_aiter_emulation"


def load_emulation():
    """``tests/backends/rocm/aiter_emulation.py`` as a module (test directories are not
    packages)."""
    if _NAME not in sys.modules:
        path = Path(__file__).with_name("aiter_emulation.py")
        spec = importlib.util.spec_from_file_location(_NAME, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


@pytest.fixture(scope="session")
def aiter_emulation():
    """The emulation module (never the real aiter)."""
    return load_emulation()


@pytest.fixture
def emulated_aiter(monkeypatch, aiter_emulation):
    """``sys.modules["aiter"]`` replaced by the emulation and ``EAGLE_HAL_ROCM_AITER=1`` for
    one test; returns the fake module (its ``paged_attention_v1.calls`` record each call)."""
    module = aiter_emulation.emulated_aiter_module()
    monkeypatch.setitem(sys.modules, "aiter", module)
    monkeypatch.setenv("EAGLE_HAL_ROCM_AITER", "1")
    return module
