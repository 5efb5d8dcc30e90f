"""The prompts and the scripted adaptive run shared by the speculative-overlap tests
(``test_speculative_overlap.py``) and the controller-report tests (``test_reports.py``).

``scripted`` builds an overlapped adaptive run whose depths follow a fixed schedule
(``eagle_hal.testing.adaptive.ScriptedController``), so that depth switches come at known
calls and every report to the controller is recorded.
"""

from __future__ import annotations

from eagle_hal.api import LLM
from eagle_hal.spec.config import SpecConfig
from eagle_hal.testing.adaptive import ScriptedController

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3, 2], [3, 8, 4, 6, 2, 6, 4, 3]]
ADAPTIVE = SpecConfig(3, 2, 6, adaptive=True, adaptive_steps=(0, 1, 3, 5))


def scripted(backend, pair, schedule, *, graphs=False, **kwargs):
    llm = LLM.from_models(backend, *pair, None, ADAPTIVE, seed=0, **kwargs)
    if graphs:
        assert llm.runner.enable_graphs()
    llm.worker.overlap = True
    llm.worker.controller = ScriptedController(schedule)
    return llm
