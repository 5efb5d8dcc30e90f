"""Fixtures for the worker and engine tests (``backend`` and ``pair``: the overlap tests').

The helper modules beside the tests (simulated devices, scenes several test modules share)
are made importable under pytest's importlib import mode.
"""

from __future__ import annotations

import os
import sys

import pytest
from eagle_hal import select_backend
from eagle_hal.testing.models import matching_eagle1, near_bigram_target

sys.path.insert(0, os.path.dirname(__file__))


@pytest.fixture(scope="module")
def cpu_backend():
    from eagle_hal import select_backend

    return select_backend("cpu")


@pytest.fixture(scope="module")
def backend():
    return select_backend("cpu")


@pytest.fixture(scope="module")
def pair():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)


@pytest.fixture(scope="module")
def graph_backend():
    from eagle_hal.testing.graphs import replaying_cpu_backend

    return replaying_cpu_backend()
