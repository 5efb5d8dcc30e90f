"""The CUDA tests reuse the engine tests' prefix-sharing workloads; importlib mode does not
put another test folder on ``sys.path``."""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "core", "engine"))
