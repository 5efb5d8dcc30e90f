"""Fixtures for the MUSA backend tests: the mate emulation, loaded by path and installed as
a fake ``mate`` module."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def mate_emulation(sibling_module):
    """The emulation module (never the real mate)."""
    return sibling_module(Path(__file__).with_name("mate_emulation.py"))


@pytest.fixture
def emulated_mate(monkeypatch, mate_emulation):
    """``sys.modules["mate"]`` replaced by the emulation and ``EAGLE_HAL_MUSA_MATE=1`` for
    one test; returns the fake module (its ``flash_attn_with_kvcache.calls`` record calls)."""
    module = mate_emulation.emulated_mate_module()
    monkeypatch.setitem(sys.modules, "mate", module)
    monkeypatch.setenv("EAGLE_HAL_MUSA_MATE", "1")
    return module
