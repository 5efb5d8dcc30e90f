"""hal.graphs: merging the host updates of several forwards captured in one graph."""

from __future__ import annotations

import pytest
from eagle_hal.hal.graphs import merge_host_updates


def test_lists_concatenate_key_by_key_in_capture_order():
    """Each key's per-call entries follow capture order; forwards without updates add none."""
    first = {"lengths": [{"kv": [3]}], "only_first": [1]}
    second = {"lengths": [{"kv": [4]}, {"kv": [5]}]}
    merged = merge_host_updates([first, None, second])
    assert merged == {"lengths": [{"kv": [3]}, {"kv": [4]}, {"kv": [5]}], "only_first": [1]}
    assert first == {"lengths": [{"kv": [3]}], "only_first": [1]}  # inputs left as they were


def test_no_updates_give_none():
    """No forward with host updates: the replay gets None."""
    assert merge_host_updates([None, None]) is None and merge_host_updates([]) is None
    assert merge_host_updates([{}]) is None


def test_a_value_that_is_not_a_list_is_refused():
    """A value without per-call entries cannot be merged across forwards."""
    with pytest.raises(TypeError, match="'lengths' is a tuple"):
        merge_host_updates([{"lengths": (3,)}])
