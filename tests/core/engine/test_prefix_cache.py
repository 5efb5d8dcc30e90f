"""The prefix cache with the page allocator and the request table, in integers only.

The oracle of the property test is a brute-force model: cached prefixes as token tuples
(no hashing), reference counts per page, the idle pages in a plain list in release order
(least recently used first), and a fake KV store whose every slot records the tokens its
K/V were computed from (the draft's K/V at position p depend on tokens 0 .. p + 1).
"""

from __future__ import annotations

import pytest
from eagle_hal.engine.page_allocator import PageAllocator, RequestTokenTable
from eagle_hal.engine.prefix_cache import page_keys
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

# -- small cases --------------------------------------------------------------------------


def cached_table(num_pages: int = 12, page_size: int = 2, rows: int = 4) -> RequestTokenTable:
    allocator = PageAllocator(num_pages, page_size)
    allocator.enable_prefix_cache()
    return RequestTokenTable(allocator, rows, 64)


def admit(table: RequestTokenTable, tokens: list[int], scope=None) -> tuple[int, int]:
    row = table.add_request(scope)
    covered = table.attach_prefix(row, table.match_prefix(tokens, scope), len(tokens))
    table.reserve(row, len(tokens))
    table.write_slots(row, covered, len(tokens))
    return row, covered


def test_a_page_is_keyed_one_token_past_its_end() -> None:
    table = cached_table(page_size=2)
    row, covered = admit(table, [1, 2, 3, 4, 5])
    assert covered == 0
    # positions 0..4 computed; page 1 (positions 2, 3) needs token 4 in its key
    assert table.cache_prefix(row, [1, 2, 3, 4, 5, 6], 5) == 2
    table.release(row)
    assert table.allocator.num_used_pages == 0 and table.allocator.num_cached_free_pages == 2
    assert len(table.match_prefix([1, 2, 3, 4, 5, 8])) == 2
    # the same 4 tokens and another fifth: page 1's draft K/V depend on position 4's token
    assert len(table.match_prefix([1, 2, 3, 4, 7, 8])) == 1
    assert len(table.match_prefix([1, 2, 9, 4, 5, 8])) == 0  # page 0's on position 2's
    # at most the pages entirely before the last token: 5 tokens hit 2 pages, 4 hit 1
    assert len(table.match_prefix([1, 2, 3, 4, 5])) == 2
    assert len(table.match_prefix([1, 2, 3, 4])) == 1
    assert table.match_prefix([1, 2, 3, 4, 5], scope="other") == []


def test_hits_share_pages_and_release_keeps_them_for_the_other_holder() -> None:
    table = cached_table(page_size=1)
    first, _ = admit(table, [5, 6, 7, 8])
    table.cache_prefix(first, [5, 6, 7, 8, 9], 4)
    second, covered = admit(table, [5, 6, 7, 1])
    assert covered == 2  # [5, 6, 7] keys pages 0 and 1 (page 2 would need the token after 7)
    shared = table.pages(second)[:2]
    assert shared == table.pages(first)[:2]
    assert all(table.allocator.ref_count(p) == 2 for p in shared)
    with pytest.raises(ValueError, match="read-only"):
        table.write_slots(second, 1, 3)
    with pytest.raises(ValueError, match="read-only"):
        table.truncate(second, 1)
    table.release(first)  # its reference only: the second still reads them
    assert all(table.allocator.ref_count(p) == 1 for p in shared)
    assert not table.leaked_pages()
    table.release(second)
    assert table.allocator.num_used_pages == 0 and not table.leaked_pages()


def test_allocation_evicts_least_recently_released_first() -> None:
    table = cached_table(num_pages=5, page_size=1)  # 4 usable pages
    a, _ = admit(table, [1, 2, 3])
    table.cache_prefix(a, [1, 2, 3], 2)  # pages for [1] and [1, 2]
    table.release(a)
    b, _ = admit(table, [4, 5])
    table.cache_prefix(b, [4, 5], 1)  # the page for [4]
    table.release(b)
    assert table.allocator.num_cached_free_pages == 3 and table.allocator.num_free_pages == 4
    c = table.add_request()
    table.reserve(c, 2)  # one idle page and the oldest cached one
    assert table.prefix_cache.stats.evictions == 1
    assert table.match_prefix([1, 2, 3]) == []  # the chain starts at the evicted page
    assert len(table.match_prefix([4, 5])) == 1


def test_turning_the_cache_off_frees_the_cached_pages() -> None:
    table = cached_table(num_pages=6, page_size=1)
    row, _ = admit(table, [1, 2, 3])
    table.cache_prefix(row, [1, 2, 3, 4], 3)
    table.release(row)
    assert table.allocator.num_cached_free_pages == 3
    table.allocator.enable_prefix_cache(False)
    assert table.allocator.num_free_pages == 5 and table.prefix_cache is None
    assert table.match_prefix([1, 2, 3, 4]) == []


def test_keys_chain_and_scope() -> None:
    keys = page_keys(None, [1, 2, 3, 4, 5], 2)
    assert len(keys) == 2 and len(set(keys)) == 2
    assert page_keys(None, [1, 2, 3, 4, 6], 2)[0] == keys[0]
    assert page_keys(None, [1, 2, 3, 4, 6], 2)[1] != keys[1]
    assert page_keys("k", [1, 2, 3, 4, 5], 2)[0] != keys[0]


# -- property test ------------------------------------------------------------------------

PAGES = 14
TOKENS = st.lists(st.integers(0, 2), min_size=1, max_size=9)  # a small vocabulary: hits


class CacheMachine(RuleBasedStateMachine):
    """Random admit / extend / speculate / publish / finish / preempt sequences (evictions
    happen whenever an allocation finds the free list short)."""

    def __init__(self) -> None:
        super().__init__()
        self.table: RequestTokenTable | None = None

    @precondition(lambda self: self.table is None)
    @rule(page_size=st.sampled_from([1, 2, 4]))
    def start(self, page_size: int) -> None:
        self.size = page_size
        allocator = PageAllocator(PAGES, page_size)
        allocator.enable_prefix_cache()
        self.table = RequestTokenTable(allocator, 4, 64)
        # the model
        self.refs = [0] * PAGES
        self.idle: list[int] = []  # cached pages no row holds, least recently released first
        self.cached: dict[tuple, int] = {}  # (scope, token prefix) -> page
        self.free = set(range(1, PAGES))
        self.rows: dict[int, tuple[object, list[int]]] = {}  # row -> (scope, its tokens)
        self.kv: dict[int, tuple] = {}  # slot -> tokens its K/V were computed from
        self.hit_tokens = self.lookups = self.lookup_tokens = 0

    # -- model helpers ---------------------------------------------------------------------

    def page_of_key(self, scope, prefix) -> int | None:
        return self.cached.get((scope, tuple(prefix)))

    def shared(self, page: int) -> bool:
        return self.refs[page] > 1 or page in self.cached.values()

    def grow(self, row: int, new_len: int) -> bool:
        """Reserve through the table; check the pages it took against the model."""
        table = self.table
        need = table.pages_needed(row, new_len)
        if need > len(self.free) + len(self.idle):
            assert not table.can_reserve(row, new_len)
            return False
        before = table.pages(row)
        evicted = self.idle[: max(0, need - len(self.free))]
        table.reserve(row, new_len)
        fresh = table.pages(row)[len(before):]
        assert len(fresh) == need
        for page in evicted:  # least recently released first
            del self.idle[self.idle.index(page)]
            self.cached = {k: p for k, p in self.cached.items() if p != page}
            self.free.add(page)
        for page in fresh:
            assert page in self.free and self.refs[page] == 0, "took a page someone holds"
            self.free.remove(page)
            self.refs[page] = 1
        return True

    def write(self, row: int, start: int, end: int, tokens: list[int]) -> None:
        """A forward writing positions [start, end) of ``row``; ``tokens`` reach at least
        one past ``end - 1`` (the draft runs one token behind the target)."""
        slots = self.table.write_slots(row, start, end)
        for position, slot in zip(range(start, end), slots, strict=True):
            assert not self.shared(slot // self.size), "a write into a shared page"
            self.kv[slot] = tuple(tokens[: position + 2])

    def drop(self, row: int) -> None:
        for page in self.table.pages(row):
            self.refs[page] -= 1
            if self.refs[page] == 0:
                if page in self.cached.values():
                    self.idle.append(page)
                else:
                    self.free.add(page)
        self.table.release(row)
        del self.rows[row]

    def publish(self, row: int, valid: int) -> None:
        scope, tokens = self.rows[row]
        self.table.cache_prefix(row, tokens, valid)
        pages = self.table.pages(row)
        limit = min(valid, self.table.length(row), len(tokens) - 1) // self.size
        for i in range(limit):
            key = (scope, tuple(tokens[: (i + 1) * self.size + 1]))
            if key in self.cached:
                if self.cached[key] != pages[i]:
                    break
                continue
            if pages[i] in self.cached.values():
                break
            self.cached[key] = pages[i]

    # -- rules -----------------------------------------------------------------------------

    @precondition(lambda self: self.table is not None and len(self.rows) < 4)
    @rule(tokens=TOKENS, root=st.integers(0, 2), scope=st.sampled_from([None, "a"]),
          extra=st.integers(0, 2))
    def admit(self, tokens: list[int], root: int, scope, extra: int) -> None:
        """A prefill of context ``tokens``; ``root``: the token it samples."""
        table = self.table
        expected = []
        for i in range((len(tokens) - 1) // self.size):
            page = self.page_of_key(scope, tokens[: (i + 1) * self.size + 1])
            if page is None:
                break
            expected.append(page)
        hit = table.match_prefix(tokens, scope)
        assert hit == expected
        needed = -(-(len(tokens) + extra) // self.size) - len(hit)
        revived = sum(1 for p in hit if p in self.idle)
        if needed + revived > len(self.free) + len(self.idle):
            return
        row = table.add_request(scope)
        covered = table.attach_prefix(row, hit, len(tokens))
        assert covered == len(hit) * self.size
        for page in hit:
            if self.refs[page] == 0:
                self.idle.remove(page)
            self.refs[page] += 1
        self.lookups += 1
        self.lookup_tokens += len(tokens)
        self.hit_tokens += covered
        for position, slot in enumerate(table.slots(row, 0, covered)):
            assert self.kv[slot] == tuple(tokens[: position + 2]), "a hit on stale K/V"
        self.rows[row] = (scope, list(tokens) + [root])  # a row's tokens: its length + 1
        assert self.grow(row, len(tokens))
        self.write(row, covered, len(tokens), tokens + [root])  # the prefill over the suffix

    @precondition(lambda self: self.table is not None and self.rows)
    @rule(data=st.data(), new=TOKENS, rejected=st.integers(0, 3))
    def extend(self, data, new: list[int], rejected: int) -> None:
        """A decode iteration: reserve the emitted tokens' positions plus a rejected tail,
        write all of them, truncate the tail away (rejection). The row's pending token
        takes the first new position; the last new token becomes the pending one."""
        row = data.draw(st.sampled_from(sorted(self.rows)))
        scope, tokens = self.rows[row]
        start = self.table.length(row)
        end = start + len(new)
        if end + rejected > 60 or not self.grow(row, end + rejected):
            return
        tokens.extend(new)
        self.write(row, start, end + rejected, tokens + [0] * (rejected + 1))
        before = set(self.table.pages(row))
        self.table.truncate(row, end)
        for page in before - set(self.table.pages(row)):
            self.refs[page] -= 1
            assert self.refs[page] == 0 and page not in self.cached.values()
            self.free.add(page)

    @precondition(lambda self: self.table is not None and self.rows)
    @rule(data=st.data(), lag=st.integers(0, 3))
    def publish_some(self, data, lag: int) -> None:
        row = data.draw(st.sampled_from(sorted(self.rows)))
        self.publish(row, max(self.table.length(row) - lag, 0))  # a draft lagging by lag

    @precondition(lambda self: self.table is not None and self.rows)
    @rule(data=st.data(), publish=st.booleans())
    def finish_or_preempt(self, data, publish: bool) -> None:
        row = data.draw(st.sampled_from(sorted(self.rows)))
        if publish:  # finished: its text joins the cache
            self.publish(row, self.table.length(row))
        self.drop(row)

    @precondition(lambda self: self.table is not None and self.rows)
    @rule(data=st.data())
    def write_into_read_only_prefix_raises(self, data) -> None:
        row = data.draw(st.sampled_from(sorted(self.rows)))
        frozen = self.table.writable_from(row)
        if frozen:
            with pytest.raises(ValueError, match="read-only"):
                self.table.write_slots(row, frozen - 1, frozen)

    # -- invariants ------------------------------------------------------------------------

    @invariant()
    def accounting_is_exact(self) -> None:
        if self.table is None:
            return
        allocator = self.table.allocator
        referenced = sum(1 for r in self.refs[1:] if r)
        assert allocator.num_used_pages == referenced
        assert allocator.num_cached_free_pages == len(self.idle)
        assert allocator.num_free_pages == len(self.free) + len(self.idle)
        assert referenced + len(self.idle) + len(self.free) == PAGES - 1
        assert [allocator.ref_count(p) for p in range(1, PAGES)] == self.refs[1:]
        assert not self.table.leaked_pages()
        stats = self.table.prefix_cache.stats
        assert (stats.lookups, stats.lookup_tokens, stats.hit_tokens) == (
            self.lookups, self.lookup_tokens, self.hit_tokens)
        assert self.table.prefix_cache.num_cached_pages == len(self.cached)


CacheMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30,
                                          deadline=None)
test_cache_machine = CacheMachine.TestCase
