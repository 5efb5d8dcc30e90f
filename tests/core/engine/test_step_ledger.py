"""The step ledger (``engine.step_ledger``) against accounts kept by hand."""

from __future__ import annotations

import pytest
from eagle_hal.engine.step_ledger import StepLedger, batch_bucket


@pytest.mark.parametrize("size", range(1, 70))
def test_buckets_are_the_next_power_of_two(size: int) -> None:
    brute = next(p for p in (2 ** k for k in range(8)) if p >= size)
    assert batch_bucket(size) == brute


def test_each_step_is_charged_the_time_since_the_last_one_ended() -> None:
    ledger = StepLedger()
    ledger.start(10.0)
    ledger.record("prefill", 3, None, 3, now=10.5)  # 0.5 s since the start
    ledger.record("decode", 3, 2, 7, now=10.75)  # 0.25 s
    ledger.record("decode", 4, 0, 4, now=11.0)  # 0.25 s, the same bucket (4), depth 0
    ledger.record("decode", 1, 2, 3, now=12.0)  # 1.0 s at bucket 1
    summary = ledger.summary()
    assert summary["prefill"] == {"4": {"seconds": 0.5, "tokens": 3, "steps": 1,
                                        "tokens_per_s": 6.0, "mean_batch": 3.0}}
    four = summary["decode"]["4"]
    assert (four["seconds"], four["tokens"], four["steps"]) == (0.5, 11, 2)
    assert four["tokens_per_s"] == pytest.approx(22.0)
    assert four["mean_batch"] == pytest.approx(3.5)  # batches of 3 and 4
    assert four["by_depth"] == {
        "0": {"seconds": 0.25, "tokens": 4, "steps": 1, "tokens_per_s": 16.0, "mean_batch": 4.0},
        "2": {"seconds": 0.25, "tokens": 7, "steps": 1, "tokens_per_s": 28.0, "mean_batch": 3.0},
    }
    assert summary["decode"]["1"]["by_depth"]["2"]["seconds"] == 1.0
    ledger.start(20.0)  # a second run: the pause between runs is nobody's
    ledger.record("decode", 1, 2, 3, now=20.5)
    assert ledger.summary()["decode"]["1"]["seconds"] == 1.5
