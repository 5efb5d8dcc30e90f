"""``SchedulerConfig.min_admit``: while requests decode, waiting ones are admitted in groups."""

from __future__ import annotations

import pytest
from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.engine.page_allocator import PageAllocator, RequestTokenTable
from eagle_hal.engine.request import FinishReason, Request, SamplingParams
from eagle_hal.engine.scheduler import DecodeWork, PrefillWork, Scheduler, SchedulerConfig
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.models import matching_eagle1, near_bigram_target


def scheduler(max_batch_size: int, min_admit: int) -> Scheduler:
    table = RequestTokenTable(PageAllocator(256, 1), max_batch_size, 64)
    config = SchedulerConfig(max_batch_size=max_batch_size, max_context=64, min_admit=min_admit)
    return Scheduler(config, table)


def request(i: int) -> Request:
    return Request(i, [1, 2, 3], SamplingParams(max_new_tokens=4))


def test_waiting_requests_are_admitted_once_enough_slots_are_free():
    sched = scheduler(4, min_admit=2)
    for i in range(6):
        sched.add(request(i))
    work = sched.schedule(headroom=1)  # nothing runs: admit what fits at once
    assert isinstance(work, PrefillWork) and [r.request_id for r in work.requests] == [0, 1, 2, 3]
    sched.finish(work.requests[0], FinishReason.STOP)
    work = sched.schedule(headroom=1)  # one free slot, two waiting: keep decoding
    assert isinstance(work, DecodeWork) and len(work.requests) == 3
    sched.finish(work.requests[0], FinishReason.STOP)
    work = sched.schedule(headroom=1)  # two free slots: both waiting ones come in together
    assert isinstance(work, PrefillWork) and [r.request_id for r in work.requests] == [4, 5]


def test_fewer_waiting_than_min_admit_are_admitted_without_waiting():
    sched = scheduler(4, min_admit=3)
    for i in range(3):
        sched.add(request(i))
    assert isinstance(sched.schedule(headroom=1), PrefillWork)
    sched.add(request(3))  # one slot free, one waiting: nothing to wait for
    work = sched.schedule(headroom=1)
    assert isinstance(work, PrefillWork) and [r.request_id for r in work.requests] == [3]


@pytest.mark.parametrize("min_admit", [0, 5])
def test_min_admit_out_of_range_is_an_error(min_admit):
    with pytest.raises(ValueError, match="min_admit"):
        SchedulerConfig(max_batch_size=4, min_admit=min_admit)


def test_grouped_admission_changes_no_output():
    """Oracle: the same prompts, greedy, with admission at once (min_admit 1)."""
    backend = select_backend("cpu")
    target = near_bigram_target(seed=5)
    head = matching_eagle1(target, noise=0.02)
    prompts = [[1 + i, 2 + 2 * i, 3] for i in range(7)]
    outputs = []
    for min_admit in (1, 3):
        llm = LLM.from_models(backend, target, head, None, SpecConfig(num_steps=3),
                              max_batch_size=4, min_admit=min_admit)
        params = [SamplingParams(max_new_tokens=5 + 3 * i, ignore_eos=True) for i in range(7)]
        out = llm.generate(prompts, params)
        outputs.append([list(o.token_ids) for o in out])
        assert llm.runner.table.allocator.num_free_pages == llm.runner.table.allocator.num_pages - 1
    assert outputs[0] == outputs[1]
