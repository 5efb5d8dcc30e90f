"""Fixtures for the NPU backend tests: the torch_npu operator emulations, loaded by path."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def emulation(sibling_module):
    """The emulations of torch_npu's operators and graph API (never the real ones)."""
    return sibling_module(Path(__file__).with_name("emulation.py"))
