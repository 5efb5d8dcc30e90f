"""Shared setup for the SamplingOps tests: the brute-force oracle module and the ops."""

from __future__ import annotations

import os
import sys

import pytest

# The oracle lives beside the tests (plain Python, no eagle_hal); make it importable under
# pytest's importlib import mode.
sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="session")
def reference_ops():
    from eagle_hal.ops.reference import ReferenceSamplingOps

    return ReferenceSamplingOps()
