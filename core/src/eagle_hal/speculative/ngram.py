"""Prompt lookup: proposals from earlier occurrences of the request's own last tokens.

Text that quotes its prompt (code edits, summaries, retrieval answers, repeated phrases)
continues the way an earlier occurrence of its last few tokens continued. For a request
with tokens ``t[0:L]`` (the pending root last) and at most ``max_ngram`` tokens of match:

* an *end* ``j`` (``1 <= j < L``) matches with length ``m(j)``: the largest ``m <=
  max_ngram`` with ``t[j - m:j] == t[L - m:L]`` (0: no match); its continuation is
  ``t[j:j + S]`` (cut at ``L``). Per match length only the ``max_matches`` latest ends
  are kept (an end of length ``m`` also matches every shorter length, so the kept set is
  the same whichever length it is reached from);
* a candidate draft is a prefix ``p`` of some kept end's continuation; its support is the
  kept ends whose continuation starts with ``p``, and its score, best first: the longest
  match length in the support, how many supporting ends have that length, the latest of
  those ends, then the shorter path and the lower token. A child's support is part of its
  parent's, so a child never scores above its parent;
* of each node's children only the ``topk`` best are kept (distinct tokens, as the verify
  needs), and of those candidates the ``N - 1`` best form the tree, laid out best first
  (parents before children).

Where every match agrees, the tree is a chain: the continuation of the latest longest
match. A request with no match (no token of its tail seen before) proposes nothing and
takes a plain decoding step. The index (every n-gram of length ``<= max_ngram`` to the ends
it occurs at) grows with each emitted token, so a proposal costs the host a few dict
lookups and a trie over the kept ends, whatever the request's length.

The drafter runs on the host, hence in the eager iteration (``speculative.drafter``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eagle_hal.errors import InvalidArgument
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.speculative.drafter import Proposal
from eagle_hal.validation import check_int

__all__ = ["NgramDrafter", "NgramIndex", "is_ngram", "parse_ngram"]

DEFAULT_MAX_NGRAM = 3
DEFAULT_TOPK = 1
MAX_NGRAM_LIMIT = 32
MAX_TOPK_LIMIT = 16


def is_ngram(draft: Any) -> bool:
    """Whether a ``draft`` argument names the n-gram drafter (``"ngram"``, ``"ngram:N,K"``)."""
    return isinstance(draft, str) and draft.partition(":")[0].strip().lower() == "ngram"


def parse_ngram(name: str, text: str) -> tuple[int, int]:
    """``"ngram"`` or ``"ngram:N"`` or ``"ngram:N,K"`` -> ``(N, K)``: match at most N tokens
    (default 3), a tree of K continuations per node (default 1, a chain). Raises
    ``InvalidArgument`` naming ``name`` (``"draft"``, ``"--draft"``)."""
    allowed = (f"'ngram', 'ngram:N' or 'ngram:N,K' with N in [1, {MAX_NGRAM_LIMIT}] the "
               f"longest match and K in [1, {MAX_TOPK_LIMIT}] the branches per node")
    kind, colon, settings = text.partition(":")
    if kind.strip().lower() != "ngram":
        raise InvalidArgument(name, text, allowed)
    if not colon:
        return DEFAULT_MAX_NGRAM, DEFAULT_TOPK
    parts = [p.strip() for p in settings.split(",")]
    if not 1 <= len(parts) <= 2 or not all(p.isdigit() for p in parts):
        raise InvalidArgument(name, text, allowed)
    values = [int(p) for p in parts]
    try:
        ngram = check_int(name, values[0], low=1, high=MAX_NGRAM_LIMIT)
        topk = check_int(name, values[1], low=1, high=MAX_TOPK_LIMIT) if len(values) > 1 \
            else DEFAULT_TOPK
    except InvalidArgument:
        raise InvalidArgument(name, text, allowed) from None
    return ngram, topk


class NgramIndex:
    """One request's tokens and, per n-gram of length ``1..max_ngram``, the ends it occurs
    at (the index just past it), in increasing order."""

    def __init__(self, max_ngram: int) -> None:
        self.max_ngram = max_ngram
        self.tokens: list[int] = []
        self.ends: list[dict[tuple[int, ...], list[int]]] = [{} for _ in range(max_ngram + 1)]

    def extend(self, tokens: Sequence[int]) -> None:
        for token in tokens:
            self.tokens.append(token)
            end = len(self.tokens)
            for n in range(1, min(self.max_ngram, end) + 1):
                self.ends[n].setdefault(tuple(self.tokens[end - n:]), []).append(end)

    def sync(self, tokens: Sequence[int]) -> None:
        """Make the index hold ``tokens``: append what it lacks, or rebuild when they
        are not a continuation of what it holds."""
        held = len(self.tokens)
        if held > len(tokens) or (held and self.tokens[-1] != tokens[held - 1]):
            self.tokens = []
            self.ends = [{} for _ in range(self.max_ngram + 1)]
            held = 0
        if held < len(tokens):
            self.extend(tokens[held:])

    def matches(self, max_matches: int) -> dict[int, int]:
        """Every kept end ``j < L`` with its match length (see the module docstring)."""
        tokens, length = self.tokens, len(self.tokens)
        found: dict[int, int] = {}
        for n in range(1, min(self.max_ngram, length) + 1):
            ends = self.ends[n].get(tuple(tokens[length - n:]))
            if not ends:
                break  # no longer suffix can occur where this one does not
            kept = [j for j in ends[-(max_matches + 1):] if j < length][-max_matches:]
            if not kept:
                break
            for j in kept:
                found[j] = n  # n grows: the last one written is the longest
        return found


class _Node:
    __slots__ = ("children", "depth", "support", "token")

    def __init__(self, token: int, depth: int) -> None:
        self.token, self.depth = token, depth
        self.children: dict[int, _Node] = {}
        self.support: list[tuple[int, int]] = []  # (match length, end)

    def key(self) -> tuple[int, int, int, int, int]:
        """Sort key, best first (see the module docstring)."""
        best = max(m for m, _ in self.support)
        top = [j for m, j in self.support if m == best]
        return (-best, -len(top), -max(top), self.depth, self.token)


def propose_tree(index: NgramIndex, steps: int, topk: int, budget: int,
                 max_matches: int) -> Proposal:
    """The proposal for the tokens ``index`` holds: at most ``steps`` levels, ``topk``
    children per node and ``budget`` nodes."""
    if steps <= 0 or budget <= 0:
        return Proposal()
    matches = index.matches(max_matches)
    if not matches:
        return Proposal()
    tokens, length = index.tokens, len(index.tokens)
    root = _Node(-1, 0)
    for end, match in matches.items():
        node = root
        for token in tokens[end:min(end + steps, length)]:
            child = node.children.get(token)
            if child is None:
                child = node.children[token] = _Node(token, node.depth + 1)
            child.support.append((match, end))
            node = child
    candidates: list[tuple[tuple[int, ...], _Node, _Node | None]] = []
    stack: list[_Node] = [root]
    while stack:  # every node whose path keeps to each level's best K children
        node = stack.pop()
        ranked = sorted(node.children.values(), key=_Node.key)[:topk]
        for child in ranked:
            candidates.append((child.key(), child, node))
            stack.append(child)
    candidates.sort(key=lambda c: c[0])
    chosen = candidates[:budget]  # parents sort before their children: closed under parents
    number = {id(root): 0}
    out_tokens, out_parents = [], []
    for i, (_, node, parent) in enumerate(chosen):
        number[id(node)] = i + 1
        out_tokens.append(node.token)
        out_parents.append(number[id(parent)])
    return Proposal(tuple(out_tokens), tuple(out_parents))


class NgramDrafter:
    """The prompt-lookup ``Drafter`` (see the module docstring): matches of at most
    ``max_ngram`` tokens, at most ``topk`` children per node (the iteration's shape may
    narrow it), the ``max_matches`` latest ends per match length. ``observe`` appends the
    emitted tokens to the request's index; ``propose`` checks it against the request's
    tokens and rebuilds it where they differ (a request cut short, or re-admitted)."""

    on_device = False

    def __init__(self, max_ngram: int = DEFAULT_MAX_NGRAM, topk: int = DEFAULT_TOPK,
                 max_matches: int = 64) -> None:
        self.max_ngram = check_int("max_ngram", max_ngram, low=1, high=MAX_NGRAM_LIMIT)
        self.topk = check_int("topk", topk, low=1, high=MAX_TOPK_LIMIT)
        self.max_matches = check_int("max_matches", max_matches, low=1)
        self._indexes: dict[int, NgramIndex] = {}

    def _index(self, request_id: int) -> NgramIndex:
        index = self._indexes.get(request_id)
        if index is None:
            index = self._indexes[request_id] = NgramIndex(self.max_ngram)
        return index

    def propose(self, request_ids: Sequence[int], tokens: Sequence[Sequence[int]],
                shape: TreeShape) -> list[Proposal]:
        topk = min(self.topk, shape.topk)
        proposals = []
        for request_id, seen in zip(request_ids, tokens, strict=True):
            index = self._index(request_id)
            index.sync(seen)
            proposals.append(propose_tree(index, shape.num_steps, topk,
                                         shape.num_draft_tokens - 1, self.max_matches))
        return proposals

    def observe(self, request_id: int, emitted: Sequence[int]) -> None:
        index = self._indexes.get(request_id)
        if index is not None:  # else the next proposal builds it from the request's tokens
            index.extend(emitted)

    def release(self, request_id: int) -> None:
        self._indexes.pop(request_id, None)
