"""Fixtures for the ROCm backend tests: the aiter emulation, loaded by path and installed as
a fake ``aiter`` module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def aiter_emulation(sibling_module):
    """The emulation module (never the real aiter)."""
    return sibling_module(Path(__file__).with_name("aiter_emulation.py"))


@pytest.fixture
def emulated_aiter(monkeypatch, aiter_emulation):
    """``sys.modules["aiter"]`` replaced by the emulation and ``EAGLE_HAL_ROCM_AITER=1`` for
    one test; returns the fake module (its ``paged_attention_v1.calls`` record each call)."""
    module = aiter_emulation.emulated_aiter_module()
    monkeypatch.setitem(sys.modules, "aiter", module)
    monkeypatch.setenv("EAGLE_HAL_ROCM_AITER", "1")
    return module
