"""Fixtures for the NPU backend tests: the torch_npu operator emulations, loaded by path."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_NAME = "eagle_hal_tests_npu_emulation"


def load_emulation():
    """``tests/backends/npu/emulation.py`` as a module (test directories are not packages)."""
    if _NAME not in sys.modules:
        spec = importlib.util.spec_from_file_location(_NAME, Path(__file__).with_name("emulation.py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[_NAME] = module
        spec.loader.exec_module(module)
    return sys.modules[_NAME]


@pytest.fixture(scope="session")
def emulation():
    """The emulations of torch_npu's operators and graph API (never the real ones)."""
    return load_emulation()
