"""The loading tests' helper modules (``gguf_layout``) import by name, as pytest's
importlib mode does not put a test's folder on ``sys.path``."""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
