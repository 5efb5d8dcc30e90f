"""Fixtures for the worker and engine tests.

The helper modules beside the tests (simulated devices, scenes several test modules share)
are made importable under pytest's importlib import mode.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="module")
def cpu_backend():
    from eagle_hal import select_backend

    return select_backend("cpu")
