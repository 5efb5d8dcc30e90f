"""Run the Triton kernels in the interpreter (on CPU tensors) when no accelerator is present.

TRITON_INTERPRET must be set before the kernels are decorated, i.e. before
``eagle_hal.ops.triton`` is first imported; the test module imports it after this runs.
The helper modules beside the tests (cases and oracles several test modules share) are
made importable under pytest's importlib import mode.
"""

from __future__ import annotations

import os
import sys

import torch

if not torch.accelerator.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(__file__))
