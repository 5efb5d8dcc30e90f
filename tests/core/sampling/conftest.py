"""The sampling tests' helper module (``sampling_oracle``) is importable beside them under
pytest's importlib import mode."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
