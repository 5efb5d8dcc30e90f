"""The CUDA backend on device 0 (skipped cleanly where none is visible); the engine tests'
prefix-sharing workloads, whose folder importlib mode does not put on ``sys.path``."""

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "core", "engine"))


@pytest.fixture(scope="module")
def cuda_backend():
    if torch.version.cuda is None or not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    from eagle_hal import select_backend

    return select_backend("cuda:0", backend="cuda")
