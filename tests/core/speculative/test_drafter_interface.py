"""Any ``Drafter`` through the verify path is lossless, whatever trees it proposes.

A scripted drafter that knows plain decoding's continuation of every request (the oracle
run first) hides it in random trees: the right path among random siblings at random
places, random widths per request (empty ones included), wrong tokens past a random
depth. Greedy speculation must emit plain decoding's tokens exactly, and the accepted
lengths must be what the hidden paths allow (so accepted nodes off their place were
moved, padding never accepted).
"""

from __future__ import annotations

import random

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.drafter import Drafter, Proposal
from eagle_hal.testing.models import tiny_target

VOCAB = 97


class HidingDrafter:
    """Proposes random trees that hide a prefix of the known continuation."""

    on_device = False

    def __init__(self, continuations: dict[tuple[int, ...], list[int]], seed: int) -> None:
        self.continuations = continuations  # prompt -> plain decoding's output
        self.rng = random.Random(seed)
        self.prompts: dict[int, tuple[int, ...]] = {}
        self.observed: dict[int, list[int]] = {}
        self.released: list[int] = []
        self.best: list[int] = []  # per proposal: how many correct tokens it holds

    def propose(self, request_ids, tokens, shape):
        out = []
        for request_id, seen in zip(request_ids, tokens, strict=True):
            prompt = next(p for p in self.continuations if tuple(seen[:len(p)]) == p)
            self.prompts[request_id] = prompt
            future = self.continuations[prompt][len(seen) - len(prompt):]
            out.append(self._tree(future, shape))
        return out

    def _tree(self, future: list[int], shape) -> Proposal:
        rng = self.rng
        parents: list[int] = []
        depth = [0]
        fanout = [0]
        for _ in range(rng.randrange(shape.num_draft_tokens)):  # 0 .. N - 1 nodes
            open_nodes = [n for n in range(len(depth))
                          if depth[n] < shape.num_steps and fanout[n] < shape.topk]
            parent = rng.choice(open_nodes)
            parents.append(parent)
            depth.append(depth[parent] + 1)
            fanout[parent] += 1
            fanout.append(0)
        # the hidden path: the ancestors of a random node no deeper than what is known
        reachable = [n for n in range(len(depth)) if depth[n] <= len(future)]
        end = rng.choice(reachable)
        path = set()
        while end:
            path.add(end)
            end = parents[end - 1]
        tokens: list[int] = []
        used: dict[int, set[int]] = {}
        for node, parent in enumerate(parents, 1):
            taken = used.setdefault(parent, set())
            right = future[depth[node] - 1]
            if node in path:
                token = right
            else:  # a decoy: not a sibling's token, never the right one
                token = rng.choice([t for t in range(VOCAB) if t not in taken and t != right])
            taken.add(token)
            tokens.append(token)
        self.best.append(len(path))
        return Proposal(tuple(tokens), tuple(parents))

    def observe(self, request_id, emitted):
        self.observed.setdefault(request_id, []).extend(emitted)

    def release(self, request_id):
        self.released.append(request_id)


@pytest.mark.parametrize("spec", [SpecConfig(4, 3, 10), SpecConfig(3, 1), SpecConfig(2, 4, 9)],
                         ids=["tree", "chain", "wide"])
@pytest.mark.parametrize("seed", [0])
def test_hidden_paths_are_found_and_nothing_else_changes(spec, seed):
    backend = select_backend("cpu")
    target = tiny_target(seed=7)
    rng = random.Random(seed)
    prompts = [[rng.randrange(VOCAB) for _ in range(rng.randrange(2, 9))] for _ in range(5)]
    params = SamplingParams(temperature=0.0, max_tokens=20)
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0),
                            max_batch_size=8).generate(prompts, params)
    continuations = {tuple(p): list(o.token_ids) + [0] * 16 for p, o in zip(prompts, plain,
                                                                             strict=True)}
    drafter = HidingDrafter(continuations, seed)
    assert isinstance(drafter, Drafter)
    llm = LLM.from_models(backend, target, None, spec=spec, max_batch_size=8, drafter=drafter)
    outputs = llm.generate(prompts, params)
    assert [o.token_ids for o in outputs] == [o.token_ids for o in plain]
    # every hidden path was accepted whole, and nothing past it: each verify emits its
    # hidden path and the bonus (the last one of a request may be cut at max_tokens)
    emitted = sum(o.stats.accepted_tokens for o in outputs)
    hidden = sum(b + 1 for b in drafter.best)
    assert hidden - len(prompts) * spec.num_steps <= emitted <= hidden
    assert max(drafter.best) > 0
    assert sorted(drafter.released) == sorted(drafter.observed)
    assert llm.leaked_pages == 0
