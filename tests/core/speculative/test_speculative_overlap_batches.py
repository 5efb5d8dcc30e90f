"""Speculative iterations with one in flight as the batch changes under the chain
(``spec/speculative_overlap.py``, ``spec/overlap_rows.py``): requests finishing one by one
and requests joining carry the chain on rather than restarting it.

The oracle is the same speculative decoding without overlap (tokens, finish reasons, text
and verify passes), with counts of the chain's starts and of the calls that only launched.
"""

from __future__ import annotations

import pytest
from eagle_hal.engine.request import SamplingParams
from eagle_hal.speculative import speculative_overlap as module
from scripted_overlap import CHAIN, PROMPTS, WIDE, run


@pytest.mark.parametrize("spec", [CHAIN, WIDE], ids=["chain", "wide"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_a_shrinking_batch_carries_one_chain(backend, graph_backend, pair, spec, graphs,
                                             monkeypatch):
    """Five requests, no queue, finishing one by one (and by EOS where they meet it): one
    chain from the first launch to the last; each later launch continues from the rows of
    the requests still running (oracle: a counter on the chain's start, the draft state
    read from the host, and tokens, finish reasons and verify passes equal to decoding
    without overlap)."""
    from eagle_hal.speculative.draft_tracker import DraftTracker

    params = [SamplingParams(max_new_tokens=n) for n in (12, 40, 5, 25, 33)]
    chosen = graph_backend if graphs else backend
    _, expected = run(chosen, pair, PROMPTS, params, overlap=False, spec=spec,
                      max_batch_size=5, graphs=graphs)
    starts = []
    draft_states = DraftTracker.states_of
    monkeypatch.setattr(DraftTracker, "states_of",
                        lambda self, requests: (starts.append(len(requests)),
                                                draft_states(self, requests))[1])
    _, got = run(chosen, pair, PROMPTS, params, overlap=True, spec=spec, max_batch_size=5,
                 graphs=graphs)
    assert got == expected
    assert starts == [5]
    assert len({len(t) for t, *_ in got}) == 5  # five lengths: four batch changes


@pytest.mark.parametrize("spec", [CHAIN, WIDE], ids=["chain", "wide"])
@pytest.mark.parametrize("graphs", [False, True], ids=["eager", "graphs"])
def test_a_request_joining_extends_the_chain(backend, graph_backend, pair, spec, graphs,
                                             monkeypatch):
    """Five requests through a batch of two: each that finishes hands its place to one
    waiting, which joins the chain in flight. One launch-only call (the first); every later
    launch carries the rows still running and starts the newcomer from the host (oracle: a
    count of the calls that returned no tokens, the draft states read from the host, and
    tokens, finish reasons and verify passes equal to decoding without overlap)."""
    from eagle_hal.speculative.draft_tracker import DraftTracker

    # far apart, so that no two finish in one iteration (that would empty the chain)
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (6, 44, 18, 80, 30)]
    chosen = graph_backend if graphs else backend
    _, expected = run(chosen, pair, PROMPTS, params, overlap=False, spec=spec,
                      max_batch_size=2, graphs=graphs)
    starts, launch_only = [], []
    draft_states = DraftTracker.states_of
    monkeypatch.setattr(DraftTracker, "states_of",
                        lambda self, requests: (starts.append(len(requests)),
                                                draft_states(self, requests))[1])
    overlapped = module.OverlappedSpeculative.decode

    def counting(self, batch):
        out = overlapped(self, batch)
        if not any(out.emitted):
            launch_only.append(batch.size)
        return out

    monkeypatch.setattr(module.OverlappedSpeculative, "decode", counting)
    _, got = run(chosen, pair, PROMPTS, params, overlap=True, spec=spec, max_batch_size=2,
                 graphs=graphs)
    assert got == expected
    assert launch_only == [2]
    assert starts == [2, 1, 1, 1]  # the first chain, then each newcomer alone
