"""Page allocator and request-to-token table accounting, in integers only (no tensors)."""

from __future__ import annotations

import pytest
from eagle_hal.engine.page_allocator import (
    PADDING_PAGE,
    ContextTooLong,
    KVCacheExhausted,
    PageAllocator,
    RequestRowsExhausted,
    RequestTokenTable,
)
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

# -- PageAllocator ------------------------------------------------------------------------


def test_padding_page_is_never_handed_out() -> None:
    allocator = PageAllocator(num_pages=5, page_size=4)
    assert allocator.num_free_pages == 4
    pages = allocator.allocate(4)
    assert sorted(pages) == [1, 2, 3, 4]
    assert PADDING_PAGE not in pages
    assert allocator.num_slots == 20


def test_exhaustion_raises_and_changes_nothing() -> None:
    allocator = PageAllocator(num_pages=4, page_size=1)
    first = allocator.allocate(2)
    assert not allocator.can_allocate(2)
    with pytest.raises(KVCacheExhausted, match="2 pages requested, 1 free"):
        allocator.allocate(2)
    assert allocator.num_free_pages == 1
    allocator.free(first)
    assert allocator.num_free_pages == 3 and allocator.num_used_pages == 0


@pytest.mark.parametrize("bad", [[0], [7], [-1], [2, 2]])
def test_freeing_a_page_not_allocated_raises(bad: list[int]) -> None:
    allocator = PageAllocator(num_pages=5, page_size=1)
    allocator.allocate(2)  # pages 1, 2
    with pytest.raises(ValueError):
        allocator.free(bad)
    assert allocator.num_free_pages == 2  # nothing was freed


def test_double_free_raises() -> None:
    allocator = PageAllocator(num_pages=5, page_size=1)
    pages = allocator.allocate(3)
    allocator.free(pages[:1])
    with pytest.raises(ValueError, match="double free"):
        allocator.free(pages[:2])
    assert allocator.num_free_pages == 2


def test_invalid_sizes() -> None:
    with pytest.raises(ValueError):
        PageAllocator(num_pages=1, page_size=1)
    with pytest.raises(ValueError):
        PageAllocator(num_pages=4, page_size=0)


# -- RequestTokenTable --------------------------------------------------------------------


def test_reserve_truncate_release_and_slots() -> None:
    table = RequestTokenTable(PageAllocator(num_pages=10, page_size=4), 2, 64)
    row = table.add_request()
    table.reserve(row, 6)  # 2 pages
    assert table.length(row) == 6 and table.capacity(row) == 8
    pages = table.pages(row)
    expected = [pages[p // 4] * 4 + p % 4 for p in range(6)]
    assert table.slots(row, 0, 6) == expected
    table.reserve(row, 8)  # fits in the same pages
    assert table.pages(row) == pages
    table.reserve(row, 9)
    assert len(table.pages(row)) == 3 and table.pages(row)[:2] == pages
    table.truncate(row, 4)  # exactly one page kept
    assert table.pages(row) == pages[:1] and table.slots(row, 0, 4) == expected[:4]
    table.release(row)
    assert table.allocator.num_free_pages == 9
    assert table.leaked_pages() == set()


def test_reserve_failures_leave_state_unchanged() -> None:
    table = RequestTokenTable(PageAllocator(num_pages=4, page_size=2), 2, 10)
    row = table.add_request()
    table.reserve(row, 3)
    assert not table.can_reserve(row, 7)  # needs 2 more pages, 1 free
    with pytest.raises(KVCacheExhausted):
        table.reserve(row, 7)
    assert table.length(row) == 3 and len(table.pages(row)) == 2
    with pytest.raises(ContextTooLong):
        table.reserve(row, 11)
    with pytest.raises(ValueError, match="truncate"):
        table.reserve(row, 2)
    with pytest.raises(ValueError):
        table.slots(row, 0, 4)  # past the length
    assert table.allocator.num_free_pages == 1


def test_request_rows_are_limited_and_reused() -> None:
    table = RequestTokenTable(PageAllocator(num_pages=4, page_size=1), 2, 8)
    a, b = table.add_request(), table.add_request()
    assert {a, b} == {0, 1} and not table.can_add_request()
    with pytest.raises(RequestRowsExhausted):
        table.add_request()
    table.release(a)
    assert table.add_request() == a
    with pytest.raises(ValueError, match="not in use"):
        table.length(5)


def test_dirty_ranges_cover_new_positions_only() -> None:
    table = RequestTokenTable(PageAllocator(num_pages=20, page_size=4), 2, 64)
    row = table.add_request()
    table.reserve(row, 5)
    table.reserve(row, 9)
    assert table.take_dirty_ranges() == {row: (0, 9)}
    assert table.take_dirty_ranges() == {}
    table.truncate(row, 3)
    assert table.take_dirty_ranges() == {}  # kept slots do not move
    table.reserve(row, 6)
    table.truncate(row, 5)
    assert table.take_dirty_ranges() == {row: (3, 5)}


class TableMachine(RuleBasedStateMachine):
    """Random add/reserve/truncate/release sequences: no leak, no page used twice."""

    def __init__(self) -> None:
        super().__init__()
        self.allocator = PageAllocator(num_pages=24, page_size=3)
        self.table = RequestTokenTable(self.allocator, max_requests=5, max_context=40)
        self.lengths: dict[int, int] = {}  # the model: row -> logical length

    @precondition(lambda self: len(self.lengths) < 5)
    @rule()
    def add(self) -> None:
        row = self.table.add_request()
        assert row not in self.lengths
        self.lengths[row] = 0

    @precondition(lambda self: self.lengths)
    @rule(data=st.data(), grow=st.integers(0, 20))
    def reserve(self, data: st.DataObject, grow: int) -> None:
        row = data.draw(st.sampled_from(sorted(self.lengths)))
        new_len = self.lengths[row] + grow
        free_before = self.allocator.num_free_pages
        needed = -(-new_len // 3) - -(-self.lengths[row] // 3)
        if new_len > 40:
            with pytest.raises(ContextTooLong):
                self.table.reserve(row, new_len)
        elif needed > free_before:
            assert not self.table.can_reserve(row, new_len)
            with pytest.raises(KVCacheExhausted):
                self.table.reserve(row, new_len)
        else:
            assert self.table.can_reserve(row, new_len)
            self.table.reserve(row, new_len)
            self.lengths[row] = new_len
            assert self.allocator.num_free_pages == free_before - needed
        assert self.table.length(row) == self.lengths[row]

    @precondition(lambda self: self.lengths)
    @rule(data=st.data())
    def truncate(self, data: st.DataObject) -> None:
        row = data.draw(st.sampled_from(sorted(self.lengths)))
        new_len = data.draw(st.integers(0, self.lengths[row]))
        kept_slots = self.table.slots(row, 0, new_len)
        self.table.truncate(row, new_len)
        self.lengths[row] = new_len
        assert self.table.slots(row, 0, new_len) == kept_slots

    @precondition(lambda self: self.lengths)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        row = data.draw(st.sampled_from(sorted(self.lengths)))
        self.table.release(row)
        del self.lengths[row]

    @invariant()
    def pages_are_exclusive_and_accounted(self) -> None:
        owned = [p for row in self.lengths for p in self.table.pages(row)]
        assert len(owned) == len(set(owned)), "a page is owned twice"
        assert PADDING_PAGE not in owned
        assert self.table.leaked_pages() == set()
        assert self.allocator.num_used_pages == len(owned) == self.table.num_used_pages
        for row, length in self.lengths.items():
            assert len(self.table.pages(row)) == -(-length // 3)  # exactly enough pages
        slots = [s for row, n in self.lengths.items() for s in self.table.slots(row, 0, n)]
        assert len(slots) == len(set(slots)), "a slot is used twice"
        assert all(s >= 3 for s in slots)  # never in the padding page

    def teardown(self) -> None:
        for row in list(self.lengths):
            self.table.release(row)
        assert self.allocator.num_free_pages == self.allocator.num_pages - 1


TestTableMachine = TableMachine.TestCase
TestTableMachine.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
