"""Shared fixtures for the engine tests: the graph tests' backends and model pair.

The helper modules beside the tests (``graph_runner_backends``) are made importable under
pytest's importlib import mode.
"""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))

from eagle_hal import select_backend  # noqa: E402
from eagle_hal.testing.models import matching_eagle1, near_bigram_target  # noqa: E402
from graph_runner_backends import ReplayingTorchBackend, TritonCpuBackend  # noqa: E402


@pytest.fixture(scope="module")
def backends():
    reference = select_backend("cpu")
    return (
        reference,
        TritonCpuBackend(reference.descriptor, reference.device_spec),
        ReplayingTorchBackend(reference.descriptor, reference.device_spec),
    )


@pytest.fixture(scope="module")
def pair():
    target = near_bigram_target(seed=5)
    return target, matching_eagle1(target, noise=0.02)
