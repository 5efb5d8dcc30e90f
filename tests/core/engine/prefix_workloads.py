"""Workloads whose prompts share prefixes, for the prefix-cache tests on every backend.

``conversation``: each turn's prompt is the last prompt, its answer and a new message.
``shared_prefix``: one system prompt, then questions diverging at and just after page
boundaries (page sizes 1 and 4). ``summary``: per request, the tokens, accepted tokens and
verify steps, which a wrong cached draft K/V would change even when the tokens do not.
"""

from __future__ import annotations

from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams


def conversation(llm: LLM, params: SamplingParams, turns: int = 3) -> list:
    """Multi-turn: each prompt is the last prompt, its answer and a new user message."""
    prompt, outputs = [3, 1, 4, 1, 5, 9, 2, 6, 5], []
    for turn in range(turns):
        (out,) = llm.generate([prompt], params)
        outputs.append(out)
        prompt = prompt + list(out.token_ids) + [7 + turn, 2, 8, 1 + turn]
    return outputs


def shared_prefix(llm: LLM, params: SamplingParams) -> list:
    """A system prompt, then questions that diverge at and just after page boundaries
    (page sizes 1 and 4); six requests over four rows, so later admissions hit pages
    the first prefills published."""
    system = [2, 7, 1, 8, 2, 8, 1, 8]
    first = llm.generate([system + [4, 5, 9]], params)
    tails = [[4, 5, 9, 9], [3], [4, 6], [4, 5, 9, 1, 2], [5, 5, 5], [4]]
    return first + llm.generate([system + t for t in tails], params)


def summary(outputs) -> list:
    return [(list(o.token_ids), o.stats.accepted_tokens, o.stats.verify_steps) for o in outputs]
