"""Where an overlapped speculative iteration's rows start from, and their KV reservations.

``speculative.speculative_overlap`` launches an iteration before the previous one is read back.
Each of its requests starts from one of two places:

* **carried**: the request was in the iteration in flight; its cached length, root token
  and draft state are that iteration's results, still on the device (gathered by row:
  requests that finished since leave the chain);
* **joined**: the request was not in it (it joined the batch since, after its prefill);
  its cached length and root come from the host, its draft state from the
  ``DraftTracker``.

A chain is continued when at least one row is carried; every row joined is a new chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from eagle_hal.engine.request import Request
from eagle_hal.speculative.drafting import DraftState

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.runner import ModelRunner
    from eagle_hal.speculative.draft_tracker import DraftTracker
    from eagle_hal.speculative.speculative_overlap import SpecInFlight

__all__ = ["JOINED", "fits", "reserve", "start_inputs"]

JOINED = -1  # ``SpecInFlight.rows_of``'s row of a request not in the iteration in flight


def start_inputs(
    runner: ModelRunner,
    draft: DraftTracker,
    flight: SpecInFlight | None,
    requests: Sequence[Request],
    rows_in_flight: Sequence[int] | None,
    per_row: tuple[Sequence[int], int, int, int],
) -> tuple[tuple[torch.Tensor, ...], DraftState]:
    """The device inputs of the next iteration of ``requests``: ``(rows_t, seq_t, roots,
    nodes_t, branches_t, width_t)`` and the stacked draft state. ``rows_in_flight``: each
    request's row in ``flight`` or ``JOINED`` (``None``: no row is carried). ``per_row``:
    the table rows, and the nodes, branches and path width every row has. One host-to-
    device copy, which also brings the device table up to date."""
    rows, num_nodes, topk, width = per_row
    n = len(requests)
    shape = ([num_nodes] * n, [topk] * n, [width] * n)
    if rows_in_flight is None:  # a new chain: everything from the host
        seq_t, roots, rows_t, nodes_t, branches_t, width_t = runner.upload_with_table(
            [r.cached_len for r in requests], [r.output_ids[-1] for r in requests], rows, *shape
        )
        return (rows_t, seq_t, roots, nodes_t, branches_t, width_t), draft.states_of(requests)
    assert flight is not None
    joined = [i for i, row in enumerate(rows_in_flight) if row == JOINED]
    if not joined:
        rows_t, nodes_t, branches_t, width_t, index = runner.upload_with_table(
            rows, *shape, rows_in_flight
        )
        seq_t, roots, state = flight.seq_next, flight.roots_next, flight.state_next
        if n < len(flight.requests):  # some finished: their rows leave the chain
            seq_t, roots = seq_t.index_select(0, index), roots.index_select(0, index)
            state = DraftState(*(t.index_select(0, index) for t in state))
        return (rows_t, seq_t, roots, nodes_t, branches_t, width_t), state
    # some rows carried, some joined: gather the carried ones, then write the joined over
    newcomers = [requests[i] for i in joined]
    rows_t, nodes_t, branches_t, width_t, index, at, seq_new, roots_new = (
        runner.upload_with_table(
            rows, *shape, [max(row, 0) for row in rows_in_flight], joined,
            [r.cached_len for r in newcomers], [r.output_ids[-1] for r in newcomers],
        )
    )
    seq_t = flight.seq_next.index_select(0, index).index_copy(0, at, seq_new)
    roots = flight.roots_next.index_select(0, index).index_copy(0, at, roots_new)
    fresh = draft.states_of(newcomers)
    state = DraftState(*(
        carried.index_select(0, index).index_copy(0, at, new.to(carried.dtype))
        for carried, new in zip(flight.state_next, fresh, strict=True)
    ))
    return (rows_t, seq_t, roots, nodes_t, branches_t, width_t), state


def fits(table: Any, rows: Sequence[int], lengths: Sequence[int]) -> bool:
    """Whether every row could grow to its length: within the context and the free pages."""
    if any(n > table.max_context for n in lengths):
        return False
    grow = [(row, n) for row, n in zip(rows, lengths, strict=True) if n > table.length(row)]
    return sum(table.pages_needed(row, n) for row, n in grow) <= table.allocator.num_free_pages


def reserve(table: Any, rows: Sequence[int], lengths: Sequence[int]) -> bool:
    """Grow each row to at least its length if the context and the free pages allow."""
    if not fits(table, rows, lengths):
        return False
    for row, n in zip(rows, lengths, strict=True):
        if n > table.length(row):
            table.reserve(row, n)
    return True
