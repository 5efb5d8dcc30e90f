"""What the worker reports to the adaptive controller with an iteration in flight
(``spec/reports.py``, ``ControllerReports``, as the overlapped worker of
``spec/speculative_overlap.py`` and ``spec/overlap.py`` drives it): every token and every
second lands on the right depth's account, across depth changes, batch changes, prefills
and separate runs.

Oracle: the wall clock and the tokens recorded around each decode and prefill call
(``time.perf_counter``, the emitted lists), which the reports' times and accept lengths
must add up to; the depths follow a fixed schedule (``scripted_overlap``). That the
overlapped tokens equal decoding without overlap is tested in
``test_speculative_overlap.py``.
"""

from __future__ import annotations

import pytest
from eagle_hal.engine.request import SamplingParams
from scripted_overlap import PROMPTS, scripted


def test_the_controller_is_charged_the_engine_work_between_calls(backend, pair):
    """The adaptive controller times an iteration from the end of the previous call on
    the same batch, so the work done on the tokens between calls (here a 30 ms pause per
    streamed delta, standing in for detokenising and stop checks) counts for every depth:
    an accept length that saves calls saves that work too."""
    import time

    llm = scripted(backend, pair, [3, 3, 3, 3, 0, 0, 0, 0])
    for _ in llm.stream([PROMPTS[0]], SamplingParams(max_new_tokens=40, ignore_eos=True)):
        time.sleep(0.03)
    observed = llm.worker.controller.observed
    assert {s for s, *_ in observed} == {0, 3}
    # a call that follows one which only launched (no tokens, no delta, no pause) is not
    # charged a pause: it was not paid
    paused = [seconds >= 0.03 for _, _, seconds, _ in observed]
    assert sum(paused) >= len(paused) // 2


def test_a_change_of_depth_is_charged_to_the_probe(backend, pair):
    """The calls between a change of depth and the first report at the new depth (the
    old chain's read-back, the new chain's first launch) are a cost of switching: they
    reach the controller as the catch-up part of that report, which it charges to the
    probe rather than to the depth's steady state; reports within a run of one depth
    carry none (nor a draft catch-up: the draft runs every iteration there)."""
    llm = scripted(backend, pair, [3, 3, 3, 3, 3, 0, 0, 0, 0, 0, 5, 5, 5, 5, 5])
    llm.generate([PROMPTS[0]], SamplingParams(max_new_tokens=80, ignore_eos=True))
    observed = llm.worker.controller.observed
    assert {s for s, *_ in observed} == {0, 3, 5}
    changes = [(a, b) for a, b in zip(observed, observed[1:], strict=False) if a[0] != b[0]]
    steady = [(a, b) for a, b in zip(observed, observed[1:], strict=False) if a[0] == b[0]]
    assert len(changes) >= 4 and steady
    assert all(0 < b[3] <= b[2] for _, b in changes)
    assert all(b[3] == 0 for _, b in steady)


def test_the_controller_sees_every_token_and_every_pause_as_requests_finish(backend, pair):
    """Requests finishing one by one at a fixed depth: each batch change reads the chain
    back (its tokens folded into the next report) and restarts it. Every token reaches
    the controller, and the reports' times add up to the wall time from the prefill's end
    to the last reported call's, pauses between calls (the engine's work, here 20 ms per
    streamed delta) included, whatever the batch did in between."""
    import time

    llm = scripted(backend, pair, [3])
    worker = llm.worker
    decode, calls = worker.decode, []

    def recording_decode(requests):
        start = time.perf_counter()
        reports = len(worker.controller.observed)
        emitted = decode(requests)
        got = [len(e) for e in emitted if e]
        calls.append((start, time.perf_counter(), len(worker.controller.observed) > reports,
                      sum(got) / len(got) if got else 0.0))
        return emitted

    worker.decode = recording_decode
    prefill, prefills = worker.prefill, []
    ends = []

    def recording_prefill(requests):
        prefills.append(len(calls))
        emitted = prefill(requests)
        ends.append(time.perf_counter())
        return emitted

    worker.prefill = recording_prefill
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (12, 40, 5, 25, 33)]
    for _ in llm.stream(PROMPTS, params):
        time.sleep(0.02)
    assert prefills == [0]  # one prefill, before the first decode: no time outside a depth
    observed = worker.controller.observed
    last = max(i for i, call in enumerate(calls) if call[2])
    assert sum(a for _, a, _, _ in observed) == pytest.approx(
        sum(call[3] for call in calls[: last + 1]), abs=1e-9)
    assert sum(seconds for _, _, seconds, _ in observed) == pytest.approx(
        calls[last][1] - ends[0], rel=0.01, abs=0.002)


def test_reports_are_consistent_across_depth_changes_and_finishing_requests(backend, pair):
    """Every report's catch-up part is within its time, and tokens read back at one depth
    are never reported as another's (an S = 0 report is one token per request)."""
    for schedule in ([3, 3, 3, 0, 0], [3, 3, 3, 3, 0, 0, 0, 5, 5, 5], [0, 0, 3, 3, 3]):
        llm = scripted(backend, pair, schedule, max_batch_size=5)
        params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (12, 40, 5, 25, 33)]
        llm.generate(PROMPTS, params)
        observed = llm.worker.controller.observed
        assert observed
        assert all(0.0 <= c <= seconds + 1e-9 for _, _, seconds, c in observed)
        assert all(a == 1.0 for s, a, _, _ in observed if s == 0)


@pytest.mark.parametrize("schedule", [[3], [0]], ids=["chain", "plain"])
def test_a_prefill_with_an_iteration_in_flight_leaves_the_wait_on_the_depth(
    backend, pair, schedule
):
    """Five requests through a batch of two: prefills run while an iteration is in flight.
    The time from the call before a prefill to the prefill's start (here the engine's
    work, a 20 ms pause per streamed delta; on a GPU also the device finishing the
    iteration, which the prefill's read-back would otherwise absorb) is the depth's, and
    so is the time from a prefill's end to the next call: the reports' times add up to
    the wall time from the first prefill's end to the last reported call's, less the
    later prefills' own time. (A prefill that drops both pauses rates a depth ~2x too fast
    at batch 16 on an H200, where requests join often.)"""
    import time

    llm = scripted(backend, pair, schedule, max_batch_size=2)
    worker = llm.worker
    decode, prefill, calls, prefills = worker.decode, worker.prefill, [], []

    def recording_decode(requests):
        start = time.perf_counter()
        reports = len(worker.controller.observed)
        emitted = decode(requests)
        calls.append((start, time.perf_counter(), len(worker.controller.observed) > reports))
        return emitted

    def recording_prefill(requests):
        in_flight = worker.in_flight
        start = time.perf_counter()
        emitted = prefill(requests)
        prefills.append((len(calls), in_flight, start, time.perf_counter()))
        return emitted

    worker.decode, worker.prefill = recording_decode, recording_prefill
    params = [SamplingParams(max_new_tokens=n, ignore_eos=True) for n in (12, 30, 9, 20, 15)]
    for _ in llm.stream(PROMPTS, params):
        time.sleep(0.02)
    last = max(i for i, call in enumerate(calls) if call[2])
    mid_run = [p for p in prefills if 0 < p[0] <= last]
    assert mid_run and any(in_flight for _, in_flight, _, _ in mid_run)
    observed = worker.controller.observed
    prefill_time = sum(end - start for _, _, start, end in mid_run)
    first = max(end for at, _, _, end in prefills if at == 0)  # the clock starts there
    assert sum(seconds for _, _, seconds, _ in observed) == pytest.approx(
        calls[last][1] - first - prefill_time, rel=0.01, abs=0.003)


@pytest.mark.parametrize("schedule", [[3], [0]], ids=["chain", "plain"])
def test_an_iteration_left_in_flight_by_a_finished_run_charges_no_idle_time(
    backend, pair, schedule
):
    """A run's last call leaves an iteration in flight whose requests have all finished.
    The next run's first prefill must not let it 'finish on the depth's clock': the time
    since that call is idle, no depth's. (Before, a 0.3 s pause between two runs went into
    the second run's first report: a review found it.)"""
    import time

    llm = scripted(backend, pair, schedule, max_batch_size=2)
    worker = llm.worker
    params = [SamplingParams(max_new_tokens=6, ignore_eos=True)]
    llm.generate(PROMPTS[:1], params)
    assert worker.in_flight
    observed = worker.controller.observed
    first_run = len(observed)
    time.sleep(0.3)
    start = time.perf_counter()
    llm.generate(PROMPTS[1:2], params)
    second_run = observed[first_run:]
    assert second_run
    # every second reported in the second run lies within the second run
    assert sum(seconds for _, _, seconds, _ in second_run) <= time.perf_counter() - start
