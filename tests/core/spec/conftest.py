"""Fixtures for the worker and engine tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def cpu_backend():
    from eagle_hal import select_backend

    return select_backend("cpu")
