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
from typing import TYPE_CHECKING, Any, NamedTuple

import torch

from eagle_hal.engine.request import Request
from eagle_hal.speculative.drafting import DraftState

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.runner import ModelRunner
    from eagle_hal.speculative.draft_tracker import DraftTracker
    from eagle_hal.speculative.speculative_overlap import SpecInFlight

__all__ = ["JOINED", "DeviceRows", "fits", "reserve", "start_inputs"]

JOINED = -1  # ``SpecInFlight.rows_of``'s row of a request not in the iteration in flight


class DeviceRows(NamedTuple):
    """Where each request of an iteration starts, on the device (each ``[B]`` int64)."""

    table_rows: torch.Tensor  # the request's row of the req_to_token table
    seq_lens: torch.Tensor  # its cached length
    roots: torch.Tensor  # its verify root token
    num_nodes: torch.Tensor  # verify nodes
    branches: torch.Tensor  # draft branches (K)
    width: torch.Tensor  # the accepted path's width the draft extend runs on


def start_inputs(
    runner: ModelRunner,
    draft: DraftTracker,
    flight: SpecInFlight | None,
    requests: Sequence[Request],
    rows_in_flight: Sequence[int] | None,
    per_row: tuple[Sequence[int], int, int, int],
) -> tuple[DeviceRows, DraftState]:
    """The device inputs of the next iteration of ``requests`` and the stacked draft state.
    ``rows_in_flight``: each request's row in ``flight`` or ``JOINED`` (``None``: no row is
    carried). ``per_row``: the table rows, and the nodes, branches and path width every row
    has. One host-to-device copy, which also brings the device table up to date."""
    table_rows, num_nodes, topk, width = per_row
    n = len(requests)
    shape = ([num_nodes] * n, [topk] * n, [width] * n)
    if rows_in_flight is None:  # a new chain: everything from the host
        seq_lens, roots, *per_request = runner.upload_with_table(
            [r.cached_len for r in requests], [r.output_ids[-1] for r in requests], table_rows,
            *shape,
        )
        rows, nodes, branches, widths = per_request
        return DeviceRows(rows, seq_lens, roots, nodes, branches, widths), draft.states_of(requests)
    assert flight is not None
    joined = [i for i, row in enumerate(rows_in_flight) if row == JOINED]
    if not joined:
        rows, nodes, branches, widths, index = runner.upload_with_table(
            table_rows, *shape, rows_in_flight
        )
        seq_lens, roots, state = flight.seq_next, flight.roots_next, flight.state_next
        if n < len(flight.requests):  # some finished: their rows leave the chain
            seq_lens, roots = seq_lens.index_select(0, index), roots.index_select(0, index)
            state = DraftState(*(t.index_select(0, index) for t in state))
        return DeviceRows(rows, seq_lens, roots, nodes, branches, widths), state
    # some rows carried, some joined: gather the carried ones, then write the joined over
    newcomers = [requests[i] for i in joined]
    rows, nodes, branches, widths, index, at, seq_new, roots_new = runner.upload_with_table(
        table_rows, *shape, [max(row, 0) for row in rows_in_flight], joined,
        [r.cached_len for r in newcomers], [r.output_ids[-1] for r in newcomers],
    )
    seq_lens = flight.seq_next.index_select(0, index).index_copy(0, at, seq_new)
    roots = flight.roots_next.index_select(0, index).index_copy(0, at, roots_new)
    fresh = draft.states_of(newcomers)
    state = DraftState(*(
        carried.index_select(0, index).index_copy(0, at, new.to(carried.dtype))
        for carried, new in zip(flight.state_next, fresh, strict=True)
    ))
    return DeviceRows(rows, seq_lens, roots, nodes, branches, widths), state


def fits(table: Any, table_rows: Sequence[int], lengths: Sequence[int]) -> bool:
    """Whether every row could grow to its length: within the context and the free pages."""
    if any(n > table.max_context for n in lengths):
        return False
    grow = [(row, n) for row, n in zip(table_rows, lengths, strict=True) if n > table.length(row)]
    return sum(table.pages_needed(row, n) for row, n in grow) <= table.allocator.num_free_pages


def reserve(table: Any, table_rows: Sequence[int], lengths: Sequence[int]) -> bool:
    """Grow each row to at least its length if the context and the free pages allow."""
    if not fits(table, table_rows, lengths):
        return False
    for row, n in zip(table_rows, lengths, strict=True):
        if n > table.length(row):
            table.reserve(row, n)
    return True
