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

from collections.abc import Iterable, Sequence

from eagle_hal.engine.prefix_cache import PrefixCache, page_keys
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

    Each page carries a reference count: ``allocate`` hands pages out with one reference,
    ``share`` adds one (a prefix-cache hit: another request reads the page), ``free``
    drops one. A page whose count reaches 0 goes back to the free list, unless the
    ``prefix_cache`` holds a key for it: then it stays *cached-free* (its K/V kept for a
    later hit) until an allocation that finds the free list short evicts it, least
    recently used first. Freed pages are reused last-in first-out. Freeing a page that
    holds no reference (double free, the padding page, or a page out of range) raises
    ``ValueError``.

    Accounting: every page but the padding one is exactly one of referenced
    (``num_used_pages``), cached-free (``num_cached_free_pages``) or idle (on the free
    list); ``num_free_pages`` counts what an allocation may take (idle and cached-free).
    """

    def __init__(self, num_pages: int, page_size: int, *,
                 prefix_cache: PrefixCache | None = None) -> None:
        if num_pages < 2:
            raise ValueError(f"need at least 2 pages (page 0 is the padding sink), got {num_pages}")
        if page_size < 1:
            raise ValueError(f"page size must be >= 1, got {page_size}")
        self.num_pages = num_pages
        self.page_size = page_size
        self._free: list[int] = list(range(num_pages - 1, PADDING_PAGE, -1))  # pop() -> 1, 2, ...
        self._refs = [0] * num_pages
        self._refs[PADDING_PAGE] = 1
        self._referenced = 0
        self.prefix_cache = prefix_cache

    def enable_prefix_cache(self, enabled: bool = True) -> None:
        """Turn prefix caching on (a fresh, empty ``PrefixCache``) or off (every cached-free
        page back to the free list; referenced pages lose their keys)."""
        if self.prefix_cache is not None:
            self._free.extend(reversed(self.prefix_cache.clear()))
        self.prefix_cache = PrefixCache(self.page_size) if enabled else None

    @property
    def num_free_pages(self) -> int:
        """Pages an allocation may take: idle ones, and cached-free ones it would evict."""
        cache = self.prefix_cache
        return len(self._free) + (cache.num_idle_pages if cache is not None else 0)

    @property
    def num_used_pages(self) -> int:
        """Pages referenced by some request (the padding page and cached-free pages are
        not counted)."""
        return self._referenced

    @property
    def num_cached_free_pages(self) -> int:
        """Pages the prefix cache alone holds (evictable)."""
        return self.prefix_cache.num_idle_pages if self.prefix_cache is not None else 0

    @property
    def num_slots(self) -> int:
        """Slots a KV storage for this allocator must hold (the padding page included)."""
        return self.num_pages * self.page_size

    def can_allocate(self, num_pages: int) -> bool:
        return 0 <= num_pages <= self.num_free_pages

    def allocate(self, num_pages: int) -> list[int]:
        """Take ``num_pages`` free pages (evicting cached-free ones when the free list is
        short). Raises ``KVCacheExhausted`` (state unchanged) when fewer are free."""
        if num_pages < 0:
            raise ValueError(f"cannot allocate a negative number of pages ({num_pages})")
        available = self.num_free_pages
        if num_pages > available:
            raise KVCacheExhausted(
                f"KV cache exhausted: {num_pages} pages requested, {available} free of "
                f"{self.num_pages - 1}; finish or preempt requests, or give the cache more memory"
            )
        short = num_pages - len(self._free)
        if short > 0:
            assert self.prefix_cache is not None
            self._free.extend(reversed(self.prefix_cache.evict(short)))
        pages = [self._free.pop() for _ in range(num_pages)]
        for page in pages:
            self._refs[page] = 1
        self._referenced += num_pages
        return pages

    def share(self, pages: Iterable[int]) -> None:
        """Add a reference to each of ``pages`` (referenced or cached-free ones: a prefix
        hit). Raises ``ValueError`` (state unchanged) for a page that is neither."""
        pages = list(pages)
        cache = self.prefix_cache
        for page in pages:
            if not (PADDING_PAGE < page < self.num_pages) or not (
                self._refs[page] or (cache is not None and cache.is_idle(page))
            ):
                raise ValueError(f"page {page} is neither referenced nor cached")
        for page in pages:
            if self._refs[page] == 0:
                assert cache is not None
                cache.revive(page)
                self._referenced += 1
            self._refs[page] += 1

    def free(self, pages: Iterable[int]) -> None:
        """Drop one reference from each of ``pages``; a page left with none returns to the
        pool (or stays cached-free). Raises ``ValueError`` (state unchanged) if any page
        holds no reference or appears twice."""
        pages = list(pages)
        if len(set(pages)) != len(pages):
            raise ValueError(f"page freed twice in one call: {sorted(pages)}")
        for page in pages:
            if not (PADDING_PAGE < page < self.num_pages) or not self._refs[page]:
                raise ValueError(f"page {page} is not allocated (double free or foreign page)")
        cache = self.prefix_cache
        for page in pages:
            self._refs[page] -= 1
            if self._refs[page]:
                continue
            self._referenced -= 1
            if cache is not None and cache.is_cached(page):
                cache.release(page)
            else:
                self._free.append(page)

    def is_allocated(self, page: int) -> bool:
        """Whether ``page`` is referenced by some request."""
        return PADDING_PAGE < page < self.num_pages and bool(self._refs[page])

    def ref_count(self, page: int) -> int:
        return self._refs[page] if PADDING_PAGE < page < self.num_pages else 0

    def is_shared(self, page: int) -> bool:
        """Whether ``page`` is read-only: in the prefix cache or referenced more than once.
        Nothing may write into such a page."""
        cache = self.prefix_cache
        return self.ref_count(page) > 1 or (cache is not None and cache.is_cached(page))


class RequestTokenTable:
    """Per-request rows of pages and logical lengths, over one ``PageAllocator``.

    The table records, per row, the token range whose slots changed since the last
    ``take_dirty_ranges`` call, so a device-side copy can be refreshed incrementally.

    With the allocator's ``prefix_cache`` on, a row may start with shared pages
    (``attach_prefix``: another request's cached prefix) and may publish its own full
    pages (``cache_prefix``). Either way those leading pages are read-only from then on:
    ``write_slots`` refuses positions in them and ``truncate`` never goes below them.
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
        self._scopes: dict[int, str | bytes | None] = {}  # row -> its prefix-cache scope
        self._frozen: dict[int, int] = {}  # row -> leading pages that are read-only

    # -- rows ------------------------------------------------------------------------------

    def can_add_request(self) -> bool:
        return bool(self._free_rows)

    def add_request(self, scope: str | bytes | None = None) -> int:
        """Take a free row (length 0, no pages). ``scope``: the prefix-cache scope its
        pages are looked up and published in. Raises ``RequestRowsExhausted``."""
        if not self._free_rows:
            raise RequestRowsExhausted(
                f"all {self.max_requests} request rows are in use; finish a request first"
            )
        row = self._free_rows.pop()
        self._pages[row] = []
        self._lengths[row] = 0
        self._scopes[row] = scope
        self._frozen[row] = 0
        return row

    def release(self, row: int) -> None:
        """Drop ``row``'s reference to each of its pages (pages other rows share stay
        theirs; cached ones stay cached-free) and free the row itself."""
        pages = self._row_pages(row)
        self.allocator.free(pages)
        del self._pages[row], self._lengths[row], self._scopes[row], self._frozen[row]
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
        if new_len < self._frozen[row] * self.page_size:
            raise ValueError(f"truncate({new_len}) into row {row}'s read-only prefix of "
                             f"{self._frozen[row] * self.page_size} positions")
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

    def write_slots(self, row: int, start: int, end: int) -> list[int]:
        """``slots(row, start, end)`` for a forward that writes K/V there: positions in the
        row's read-only (shared or cached) pages raise ``ValueError``."""
        if start < end and start < self._frozen.get(row, 0) * self.page_size:
            raise ValueError(
                f"write at positions [{start}, {end}) of row {row} would land in its "
                f"read-only prefix of {self._frozen[row] * self.page_size} positions"
            )
        return self.slots(row, start, end)

    # -- prefix cache ----------------------------------------------------------------------

    @property
    def prefix_cache(self) -> PrefixCache | None:
        return self.allocator.prefix_cache

    def writable_from(self, row: int) -> int:
        """The first position of ``row`` a forward may write."""
        self._row_pages(row)
        return self._frozen[row] * self.page_size

    def match_prefix(self, tokens: Sequence[int], scope: str | bytes | None = None) -> list[int]:
        """The cached pages a context ``tokens`` would start with (no side effect): those
        entirely before its last token, as far as the cache holds them. ``[]`` with the
        prefix cache off."""
        cache = self.allocator.prefix_cache
        if cache is None or len(tokens) <= self.page_size:
            return []
        return cache.match(page_keys(scope, tokens, self.page_size))

    def attach_prefix(self, row: int, pages: Sequence[int], context_len: int) -> int:
        """Start empty ``row`` with the shared ``pages`` (``match_prefix``'s) and account the
        lookup of a ``context_len``-token context; returns the positions covered."""
        cache = self.allocator.prefix_cache
        if self._row_pages(row) or self._lengths[row]:
            raise ValueError(f"attach_prefix on row {row}, which already holds tokens")
        if cache is None:
            return 0
        cache.stats.lookups += 1
        cache.stats.lookup_tokens += context_len
        if not pages:
            return 0
        self.allocator.share(pages)
        self._pages[row].extend(pages)
        covered = len(pages) * self.page_size
        self._lengths[row] = covered
        self._frozen[row] = len(pages)
        self._dirty[row] = (0, covered)
        cache.stats.hit_tokens += covered
        return covered

    def cache_prefix(self, row: int, tokens: Sequence[int], valid_len: int) -> int:
        """Publish ``row``'s full pages whose K/V (target and draft) are final: those below
        position ``valid_len`` that ``tokens`` (the row's tokens from position 0, at least
        one past each page) key. They become read-only. Returns the pages published."""
        cache = self.allocator.prefix_cache
        if cache is None:
            return 0
        pages = self._row_pages(row)
        limit = min(valid_len, self._lengths[row]) // self.page_size
        frozen = self._frozen[row]
        if limit <= frozen:
            return 0
        keys = page_keys(self._scopes[row], tokens, self.page_size, limit)
        published = 0
        for i in range(frozen, len(keys)):
            if not cache.insert(keys[i], pages[i]):
                # the prefix is cached in another page already (computed twice, by requests
                # admitted together): this one stays private, and so do those after it
                # (their chain would never be reached through it)
                break
            published += 1
        self._frozen[row] = frozen + published
        return published

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
        """Pages whose reference count differs from the rows holding them: handed out and
        owned by no row, or owned by fewer rows than count them (should always be empty).
        Cached-free pages hold no reference and are not leaked."""
        owners = [0] * self.allocator.num_pages
        for pages in self._pages.values():
            for page in pages:
                owners[page] += 1
        return {
            page
            for page in range(PADDING_PAGE + 1, self.allocator.num_pages)
            if self.allocator.ref_count(page) != owners[page]
        }

    def _row_pages(self, row: int) -> list[int]:
        try:
            return self._pages[row]
        except KeyError:
            raise ValueError(f"request row {row} is not in use") from None
