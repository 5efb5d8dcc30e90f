"""The prompts, specs and runs shared by the speculative-overlap tests
(``test_speculative_overlap.py``, ``test_speculative_overlap_batches.py``) and the
controller-report tests (``test_reports.py``).

``run`` decodes with or without overlap and returns what the tests compare: tokens, finish
reason, text and verify passes per request (every KV page must come back).

``scripted`` builds an overlapped adaptive run whose depths follow a fixed schedule
(``eagle_hal.testing.adaptive.ScriptedController``), so that depth switches come at known
calls and every report to the controller is recorded.
"""

from __future__ import annotations

from eagle_hal.api import LLM
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.adaptive import ScriptedController

PROMPTS = [[3, 1, 4, 1, 5], [9, 2, 6], [5, 3, 5, 8, 9, 7, 9], [3, 2], [3, 8, 4, 6, 2, 6, 4, 3]]
ADAPTIVE = SpecConfig(3, 2, 6, adaptive=True, adaptive_steps=(0, 1, 3, 5))
CHAIN, TREE, WIDE = SpecConfig(4, 1, 5), SpecConfig(3, 2, 6), SpecConfig(4, 4, 12)


def run(backend, pair, prompts, params, *, overlap, graphs=False, **kwargs):
    target, head = pair
    llm = LLM.from_models(backend, target, head, kwargs.pop("tokenizer", None),
                          kwargs.pop("spec", TREE), seed=0, **kwargs)
    if graphs:
        assert llm.runner.enable_graphs()
    llm.worker.overlap = overlap
    outputs = llm.generate(prompts, params)
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    # the verify passes too: the same drafts are accepted only from the same draft state
    return llm, [(list(o.token_ids), o.finish_reason, o.text, o.stats.verify_steps)
                 for o in outputs]


def scripted(backend, pair, schedule, *, graphs=False, **kwargs):
    llm = LLM.from_models(backend, *pair, None, ADAPTIVE, seed=0, **kwargs)
    if graphs:
        assert llm.runner.enable_graphs()
    llm.worker.overlap = True
    llm.worker.controller = ScriptedController(schedule)
    return llm
