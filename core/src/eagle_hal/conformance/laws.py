"""Exact laws of what lossless speculative sampling emits, by enumeration (test oracles).

A verify tree is given as ``children[node] = {token: child_node}`` and per-node target
distributions ``p[node]``. Tree speculative sampling with one-hot drafts emits, at each
node, a token distributed as ``p[node]``, descending when that token is a child's; so the
emitted sequence's law is the product along the path. For a chain with real draft
distributions ``q`` (drafts sampled from them), node ``i`` emits token ``a`` and continues
with probability ``min(p_i(a), q_i(a))``, and stops after emitting ``a`` with the rest of
``p_i(a)``; the last node always stops.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["chain_law", "tree_law"]

Sequence_ = tuple[int, ...]


def tree_law(
    children: Mapping[int, Mapping[int, int]], probs: Sequence[Sequence[float]], node: int = 0
) -> dict[Sequence_, float]:
    """``{emitted tokens: probability}`` of tree speculative sampling from ``node``."""
    law: dict[Sequence_, float] = {}
    for token, p in enumerate(probs[node]):
        if p <= 0:
            continue
        child = children.get(node, {}).get(token)
        if child is None:
            law[(token,)] = law.get((token,), 0.0) + p
            continue
        for rest, q in tree_law(children, probs, child).items():
            law[(token, *rest)] = law.get((token, *rest), 0.0) + p * q
    return law


def chain_law(
    target: Sequence[Sequence[float]], draft: Sequence[Sequence[float]]
) -> dict[Sequence_, float]:
    """``{emitted tokens: probability}`` of chain speculative sampling with drafts drawn
    from ``draft[i]`` (``len(target) == len(draft) + 1``)."""
    law: dict[Sequence_, float] = {}

    def walk(node: int, prefix: Sequence_, mass: float) -> None:
        for token, p in enumerate(target[node]):
            if node == len(draft):
                stop, go = p, 0.0
            else:
                go = min(p, draft[node][token])
                stop = p - go
            if stop > 0:
                law[(*prefix, token)] = law.get((*prefix, token), 0.0) + mass * stop
            if go > 0:
                walk(node + 1, (*prefix, token), mass * go)

    walk(0, (), 1.0)
    return law
