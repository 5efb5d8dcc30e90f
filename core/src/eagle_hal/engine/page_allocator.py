"""KV-cache accounting in integers: the page allocator and the request-to-token table.

Nothing here touches tensors, so every sequence of allocations can be tested exactly.

A *page* holds ``page_size`` consecutive *slots*; slot ``page * page_size + offset`` is where
one token's K/V live in every layer's storage. Page ``PADDING_PAGE`` (0) is never handed
out: it is the sink for writes from padded tokens (a captured graph runs a fixed-size
batch, and the padding rows still write K/V somewhere harmless). So an allocator over
``num_pages`` pages can hand out ``num_pages - 1`` of them.

A request owns one *row* of the table (rows come from a small row allocator, ``max_requests``
of them); the row lists the request's pages in logical order and its logical length. Token
position ``p`` of a request lives at slot ``pages[p // page_size] * page_size + p %
page_size``.
"""

from __future__ import annotations

from collections.abc import Iterable

from eagle_hal.errors import EagleHalError

__all__ = [
    "PADDING_PAGE",
    "ContextTooLong",
    "KVCacheExhausted",
    "PageAllocator",
    "RequestRowsExhausted",
    "RequestTokenTable",
]

PADDING_PAGE = 0  # never allocated; padded tokens of captured graphs write their K/V here


class KVCacheExhausted(RuntimeError):
    """Not enough free KV pages (or request rows) for an allocation; nothing was changed."""


class RequestRowsExhausted(KVCacheExhausted):
    """Every row of the request-to-token table is in use."""


class ContextTooLong(EagleHalError, ValueError):
    """A request would grow past the table's ``max_context`` positions."""


class PageAllocator:
    """Hands out pages ``1 .. num_pages - 1``; page 0 is the padding sink.

    Freed pages are reused last-in first-out. Freeing a page that is not allocated (double
    free, the padding page, or a page out of range) raises ``ValueError``.
    """

    def __init__(self, num_pages: int, page_size: int) -> None:
        if num_pages < 2:
            raise ValueError(f"need at least 2 pages (page 0 is the padding sink), got {num_pages}")
        if page_size < 1:
            raise ValueError(f"page size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._free: list[int] = list(range(num_pages - 1, PADDING_PAGE, -1))  # pop() -> 1, 2, ...
        self._in_use = bytearray(num_pages)
        self._in_use[PADDING_PAGE] = 1

    @property
    def num_free_pages(self) -> int:
        return len(self._free)

    @property
    def num_used_pages(self) -> int:
        """Pages handed out and not yet freed (the padding page is not counted)."""
        return self.num_pages - 1 - len(self._free)

    @property
    def num_slots(self) -> int:
        """Slots a KV storage for this allocator must hold (the padding page included)."""
        return self.num_pages * self.page_size

    def can_allocate(self, num_pages: int) -> bool:
        return 0 <= num_pages <= len(self._free)

    def allocate(self, num_pages: int) -> list[int]:
        """Take ``num_pages`` free pages. Raises ``KVCacheExhausted`` (state unchanged) when
        fewer are free."""
        if num_pages < 0:
            raise ValueError(f"cannot allocate a negative number of pages ({num_pages})")
        if num_pages > len(self._free):
            raise KVCacheExhausted(
                f"KV cache exhausted: {num_pages} pages requested, {len(self._free)} free of "
                f"{self.num_pages - 1}; finish or preempt requests, or give the cache more memory"
            )
        pages = [self._free.pop() for _ in range(num_pages)]
        for page in pages:
            self._in_use[page] = 1
        return pages

    def free(self, pages: Iterable[int]) -> None:
        """Return ``pages`` to the pool. Raises ``ValueError`` (state unchanged) if any page
        is not currently allocated or appears twice."""
        pages = list(pages)
        if len(set(pages)) != len(pages):
            raise ValueError(f"page freed twice in one call: {sorted(pages)}")
        for page in pages:
            if not (PADDING_PAGE < page < self.num_pages) or not self._in_use[page]:
                raise ValueError(f"page {page} is not allocated (double free or foreign page)")
        for page in pages:
            self._in_use[page] = 0
            self._free.append(page)

    def is_allocated(self, page: int) -> bool:
        return PADDING_PAGE < page < self.num_pages and bool(self._in_use[page])


class RequestTokenTable:
    """Per-request rows of pages and logical lengths, over one ``PageAllocator``.

    The table records, per row, the token range whose slots changed since the last
    ``take_dirty_ranges`` call, so a device-side copy can be refreshed incrementally.
    """

    def __init__(self, allocator: PageAllocator, max_requests: int, max_context: int) -> None:
        if max_requests < 1 or max_context < 1:
            raise ValueError("max_requests and max_context must be >= 1")
        self.allocator = allocator
        self.page_size = allocator.page_size
        self.max_requests = max_requests
        self.max_context = max_context
        self._free_rows: list[int] = list(range(max_requests - 1, -1, -1))
        self._pages: dict[int, list[int]] = {}
        self._lengths: dict[int, int] = {}
        self._dirty: dict[int, tuple[int, int]] = {}  # row -> [start, end) positions changed

    # -- rows ------------------------------------------------------------------------------

    def can_add_request(self) -> bool:
        return bool(self._free_rows)

    def add_request(self) -> int:
        """Take a free row (length 0, no pages). Raises ``RequestRowsExhausted``."""
        if not self._free_rows:
            raise RequestRowsExhausted(
                f"all {self.max_requests} request rows are in use; finish a request first"
            )
        row = self._free_rows.pop()
        self._pages[row] = []
        self._lengths[row] = 0
        return row

    def release(self, row: int) -> None:
        """Free every page of ``row`` and the row itself."""
        pages = self._row_pages(row)
        self.allocator.free(pages)
        del self._pages[row], self._lengths[row]
        self._dirty.pop(row, None)
        self._free_rows.append(row)

    @property
    def active_rows(self) -> tuple[int, ...]:
        return tuple(sorted(self._pages))

    # -- lengths ---------------------------------------------------------------------------

    def length(self, row: int) -> int:
        self._row_pages(row)
        return self._lengths[row]

    def pages(self, row: int) -> tuple[int, ...]:
        return tuple(self._row_pages(row))

    def capacity(self, row: int) -> int:
        return len(self._row_pages(row)) * self.page_size

    def pages_needed(self, row: int, new_len: int) -> int:
        """Pages ``reserve(row, new_len)`` would allocate."""
        needed = -(-new_len // self.page_size)  # ceil
        return max(0, needed - len(self._row_pages(row)))

    def can_reserve(self, row: int, new_len: int) -> bool:
        return new_len <= self.max_context and self.allocator.can_allocate(
            self.pages_needed(row, new_len)
        )

    def reserve(self, row: int, new_len: int) -> None:
        """Grow ``row`` to logical length ``new_len``, allocating pages so its capacity is at
        least ``new_len``. Raises ``KVCacheExhausted`` or ``ContextTooLong`` (state
        unchanged); ``ValueError`` if ``new_len`` is below the current length (use
        ``truncate``)."""
        pages = self._row_pages(row)
        old_len = self._lengths[row]
        if new_len < old_len:
            raise ValueError(f"reserve({new_len}) below row {row}'s length {old_len}; use truncate")
        if new_len > self.max_context:
            raise ContextTooLong(
                f"request row {row} would need {new_len} positions; the table holds "
                f"{self.max_context} (raise max_context or shorten the request)"
            )
        needed = -(-new_len // self.page_size) - len(pages)
        if needed > 0:  # called per request and decode step: most calls need no page
            pages.extend(self.allocator.allocate(needed))
        self._lengths[row] = new_len
        if new_len > old_len:
            start, end = self._dirty.get(row, (old_len, new_len))
            self._dirty[row] = (min(start, old_len), max(end, new_len))

    def truncate(self, row: int, new_len: int) -> None:
        """Shrink ``row`` to ``new_len`` tokens, freeing the pages wholly beyond it. Slots of
        the kept positions do not change."""
        old_len = self.length(row)
        if not 0 <= new_len <= old_len:
            raise ValueError(f"truncate({new_len}) outside row {row}'s length 0..{old_len}")
        keep = -(-new_len // self.page_size)
        pages = self._pages[row]
        self.allocator.free(pages[keep:])
        del pages[keep:]
        self._lengths[row] = new_len
        if row in self._dirty:
            start, end = self._dirty[row]
            end = min(end, new_len)
            if start < end:
                self._dirty[row] = (start, end)
            else:
                del self._dirty[row]

    # -- slots -----------------------------------------------------------------------------

    def slot(self, row: int, position: int) -> int:
        return self.slots(row, position, position + 1)[0]

    def slots(self, row: int, start: int, end: int) -> list[int]:
        """Slots of positions ``[start, end)`` of ``row``; ``end`` must not pass its length."""
        pages, length = self._row_pages(row), self._lengths[row]
        if not 0 <= start <= end <= length:
            raise ValueError(f"positions [{start}, {end}) outside row {row}'s length {length}")
        size = self.page_size
        if size == 1:
            return pages[start:end]
        return [pages[p // size] * size + p % size for p in range(start, end)]

    def take_dirty_ranges(self) -> dict[int, tuple[int, int]]:
        """The ``row -> [start, end)`` position ranges whose slots were defined since the last
        call, and forget them."""
        dirty, self._dirty = self._dirty, {}
        return dirty

    # -- accounting checks (tests, debugging) ----------------------------------------------

    @property
    def num_used_pages(self) -> int:
        return sum(len(pages) for pages in self._pages.values())

    def leaked_pages(self) -> set[int]:
        """Pages the allocator has handed out that no row owns (should always be empty)."""
        owned = {page for pages in self._pages.values() for page in pages}
        return {
            page
            for page in range(PADDING_PAGE + 1, self.allocator.num_pages)
            if self.allocator.is_allocated(page) and page not in owned
        }

    def _row_pages(self, row: int) -> list[int]:
        try:
            return self._pages[row]
        except KeyError:
            raise ValueError(f"request row {row} is not in use") from None
