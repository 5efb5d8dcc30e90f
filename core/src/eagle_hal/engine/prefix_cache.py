"""Prefix caching in integers: full KV pages keyed by the tokens that determine them.

A request whose context starts with tokens another request has already computed reuses
that request's pages read-only instead of recomputing them. Only *full* pages are cached,
and only while both models' K/V in them are final:

* the target's K/V at position ``p`` depend on tokens ``0 .. p``;
* the EAGLE draft's K/V at position ``p`` are computed from token ``p + 1`` and the
  target's feature at ``p``, so the draft's K/V in a page's last slot depend on the first
  token after the page.

So the key of page ``i`` covers tokens ``0 .. (i + 1) * page_size`` *inclusive*: one token
past the page. Keys form a hash chain, ``key_i = H(key_{i-1}, tokens[i*P : (i+1)*P + 1])``
with ``key_{-1} = H(scope)``: equal keys mean equal token prefixes (up to a 128-bit hash
collision) within one scope. The scope keeps clients of a server apart: a hit is visible
to a client as a shorter time to first token, which would tell it what another client
sent.

A context of ``L`` tokens can hit at most the pages entirely before its last token (page
``i`` needs token ``(i + 1) * P``, which must be a context token): the last token is always
recomputed, since its logits and hidden state start the generation.

Pages here are either *referenced* (by one or more request rows; the allocator counts
them) or *cached-free*: held by the cache alone, kept in least-recently-used order and
evicted when the allocator runs out of free pages. Nothing here touches tensors.
"""

from __future__ import annotations

import array
import collections
import dataclasses
import hashlib
from collections.abc import Iterable, Sequence

__all__ = ["PrefixCache", "PrefixCacheStats", "page_keys"]

_DIGEST = 16  # 128-bit keys: a collision becomes likely only near 2**64 cached pages


def _hash(parent: bytes, tokens: Sequence[int]) -> bytes:
    h = hashlib.blake2b(parent, digest_size=_DIGEST)
    h.update(array.array("q", tokens).tobytes())
    return h.digest()


def scope_root(scope: str | bytes | None) -> bytes:
    """The chain's start for ``scope`` (``None``: the one shared scope)."""
    data = scope.encode() if isinstance(scope, str) else (scope or b"")
    return hashlib.blake2b(b"eagle-hal prefix scope\0" + data, digest_size=_DIGEST).digest()


def page_keys(scope: str | bytes | None, tokens: Sequence[int], page_size: int,
              num_pages: int | None = None) -> list[bytes]:
    """Keys of the pages ``tokens`` determine: page ``i`` needs ``tokens[(i + 1) * P]``, so
    a sequence of ``n`` tokens keys ``(n - 1) // P`` pages (at most ``num_pages``)."""
    count = max(len(tokens) - 1, 0) // page_size
    if num_pages is not None:
        count = min(count, num_pages)
    keys, parent = [], scope_root(scope)
    for i in range(count):
        parent = _hash(parent, tokens[i * page_size : (i + 1) * page_size + 1])
        keys.append(parent)
    return keys


@dataclasses.dataclass(slots=True)
class PrefixCacheStats:
    """What admissions found: ``lookups`` contexts looked up, ``lookup_tokens`` their
    tokens, ``hit_tokens`` of them served from cached pages (not recomputed)."""

    lookups: int = 0
    lookup_tokens: int = 0
    hit_tokens: int = 0
    evictions: int = 0  # pages whose cached K/V were dropped to make room

    @property
    def hit_rate(self) -> float:
        return self.hit_tokens / self.lookup_tokens if self.lookup_tokens else 0.0

    def as_dict(self) -> dict[str, float | int]:
        return {"lookups": self.lookups, "lookup_tokens": self.lookup_tokens,
                "cached_tokens": self.hit_tokens, "hit_rate": self.hit_rate,
                "evictions": self.evictions}


class PrefixCache:
    """The key <-> page maps and the least-recently-used order of cached-free pages.

    Reference counts live in the ``PageAllocator``; it tells the cache when a cached page
    loses its last reference (``release``) or gains one back (``revive``), and asks it for
    pages to evict (``evict``) when its free list runs short."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self._page_of: dict[bytes, int] = {}
        self._key_of: dict[int, bytes] = {}
        self._idle: collections.OrderedDict[int, None] = collections.OrderedDict()  # LRU first
        self.stats = PrefixCacheStats()

    # -- queries ---------------------------------------------------------------------------

    @property
    def num_cached_pages(self) -> int:
        """Pages holding a key, referenced or not."""
        return len(self._key_of)

    @property
    def num_idle_pages(self) -> int:
        """Cached-free pages: held by the cache alone, evictable."""
        return len(self._idle)

    def is_cached(self, page: int) -> bool:
        return page in self._key_of

    def is_idle(self, page: int) -> bool:
        return page in self._idle

    def key_of(self, page: int) -> bytes | None:
        return self._key_of.get(page)

    def match(self, keys: Iterable[bytes]) -> list[int]:
        """The pages of the longest cached run of ``keys`` from the first (no side effect)."""
        pages = []
        for key in keys:
            page = self._page_of.get(key)
            if page is None:
                break
            pages.append(page)
        return pages

    # -- changes ---------------------------------------------------------------------------

    def insert(self, key: bytes, page: int) -> bool:
        """Record that referenced ``page`` holds the K/V ``key`` names; ``False`` (nothing
        changed) when the key is cached already (another page computed the same prefix)
        or the page holds another key."""
        if key in self._page_of or page in self._key_of:
            return False
        self._page_of[key] = page
        self._key_of[page] = key
        return True

    def release(self, page: int) -> None:
        """``page`` lost its last reference: it becomes the most recently used idle page."""
        self._idle[page] = None

    def revive(self, page: int) -> None:
        """Idle ``page`` is referenced again."""
        del self._idle[page]

    def evict(self, count: int) -> list[int]:
        """Drop the keys of the ``count`` least recently used idle pages; returns them."""
        pages = []
        for _ in range(count):
            page, _ = self._idle.popitem(last=False)
            del self._page_of[self._key_of.pop(page)]
            pages.append(page)
        self.stats.evictions += len(pages)
        return pages

    def clear(self) -> list[int]:
        """Forget every idle page (returned); referenced pages keep their keys."""
        return self.evict(len(self._idle))
