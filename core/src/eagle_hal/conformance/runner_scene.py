"""A ``ModelRunner`` with device graphs on and requests with random cached K/V, for the
graphs area's bucket and padding checks.

``RunnerScene`` puts a tiny random Llama target and EAGLE-1 head (``eagle_hal.testing.models``)
on the backend, in a ``ModelRunner`` whose ``GraphRunner`` captures with the backend's
``GraphCapture`` in the buckets ``BUCKETS``, at the backend's preferred page size. Requests
get ragged cached lengths whose target and draft K/V are random. The three captured forwards
are built as the EAGLE worker builds them (``speculative.worker``,
``speculative.drafting``): TARGET_VERIFY
over a random tree, the DRAFT_DECODE step of each draft depth, a uniform DRAFT_EXTEND; each
runs through the runner (graphs) or eagerly (graphs off for the call). ``chain_inputs``
and ``tree_inputs`` give the draft loop's inputs (``speculative.drafting.DraftInputs`` for
``draft_chain`` and ``draft_tree``, whose whole loop the graph runner captures as one
graph, ``engine.graphs.draft_loop``) as the worker uploads them.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from eagle_hal.backend import Backend
from eagle_hal.conformance.paged import encode_tree_mask, preferred_page_size, random_parents
from eagle_hal.engine.page_allocator import PADDING_PAGE
from eagle_hal.engine.runner import CacheConfig, ModelRunner
from eagle_hal.hal.attention import ForwardBatch, ForwardMode
from eagle_hal.speculative.drafting import DraftInputs, DraftState

__all__ = ["BUCKETS", "RunnerScene"]

BUCKETS = (1, 4)
NODES = 3  # verify tree nodes per request
BRANCHES, DRAFT_STEPS = 2, 3  # draft top-k and steps: DRAFT_DECODE runs depths 1 .. S - 1
EXTEND = 2  # draft-extend tokens per request (uniform, so capturable)
RESERVE = max(NODES, BRANCHES * DRAFT_STEPS, EXTEND)  # positions past the cached length
MAX_CONTEXT = 32


class RunnerScene:
    """A graph-enabled ``ModelRunner`` and its requests; see the module docstring.
    ``page_size`` defaults to the backend's preferred one, ``buckets`` to ``BUCKETS``."""

    def __init__(self, backend: Backend, seed: int, page_size: int | None = None,
                 buckets: tuple[int, ...] = BUCKETS) -> None:
        from eagle_hal.testing.models import tiny_eagle1, tiny_target

        device = backend.torch_device
        target = tiny_target(seed, layers=1, device=device)  # small: interpreted kernels stay fast
        head = tiny_eagle1(target, seed + 1).to(device)
        page_size = page_size or preferred_page_size(backend)
        cache = CacheConfig(num_tokens=16 * max(MAX_CONTEXT, page_size), page_size=page_size,
                            max_requests=16, max_context=MAX_CONTEXT)
        self.runner = ModelRunner(backend, target, head, cache, torch.float32)
        self.graphs_on = self.runner.enable_graphs(buckets)
        self.gen = torch.Generator().manual_seed(seed)
        self.vocab = target.config.vocab_size
        self.hidden_size = target.config.hidden_size
        self.owners: dict[int, tuple[int, int]] = {}  # slot -> (row, position) of live requests

    # -- requests ----------------------------------------------------------------------------

    def add_requests(self, count: int) -> tuple[list[int], list[int]]:
        """``count`` requests with ragged cached lengths (2 .. 12) of random K/V in every layer
        of both models, and ``RESERVE`` positions reserved past them; their rows and lengths."""
        runner, table = self.runner, self.runner.table
        table_rows, seq_lens = [], []
        for _ in range(count):
            row, seq_len = table.add_request(), int(torch.randint(2, 13, (1,), generator=self.gen))
            table.reserve(row, seq_len + RESERVE)
            held = table.slots(row, 0, seq_len + RESERVE)
            self.owners.update((slot, (row, p)) for p, slot in enumerate(held))
            slots = runner.long(table.slots(row, 0, seq_len))
            for store in (runner.target_kv, runner.draft_kv):
                assert store is not None
                for layer in range(store.num_layers):
                    shape = (seq_len, store.num_kv_heads, store.head_dim)
                    k, v = (torch.randn(shape, generator=self.gen) for _ in range(2))
                    store.write_kv(layer, slots, k.to(runner.device), v.to(runner.device))
            table_rows.append(row)
            seq_lens.append(seq_len)
        runner.sync_table()
        return table_rows, seq_lens

    def release(self, table_rows: list[int]) -> None:
        for row in table_rows:
            self.runner.table.release(row)
        self.owners = {s: o for s, o in self.owners.items() if o[0] not in table_rows}

    # -- the captured forwards, as the worker builds them ------------------------------------

    def batches(self, mode: ForwardMode, table_rows: list[int],
                seq_lens: list[int]) -> Iterator[tuple[ForwardBatch, torch.Tensor | None]]:
        """The forwards of ``mode`` for these requests and their draft input features
        (``None`` for the target): one, or one per draft depth for DRAFT_DECODE."""
        if mode is ForwardMode.TARGET_VERIFY:
            yield self._verify_batch(table_rows, seq_lens), None
        elif mode is ForwardMode.DRAFT_DECODE:
            for depth_index in range(DRAFT_STEPS - 1):
                yield self._draft_decode_batch(table_rows, seq_lens, depth_index)
        elif mode is ForwardMode.DRAFT_EXTEND:
            size = len(table_rows)
            ids = torch.randint(self.vocab, (size * EXTEND,), generator=self.gen).tolist()
            batch = self.runner.causal_batch(mode, ids, table_rows, seq_lens, [EXTEND] * size)
            yield batch, self._features(batch.num_tokens)
        else:
            raise ValueError(f"{mode.value} is not one of the checked captured forwards")

    def _features(self, tokens: int) -> torch.Tensor:
        return torch.randn(tokens, self.hidden_size, generator=self.gen).to(self.runner.device)

    def _verify_batch(self, table_rows: list[int], seq_lens: list[int]) -> ForwardBatch:
        runner, size = self.runner, len(table_rows)
        parents = random_parents(self.gen, size, NODES)  # [B, N]
        depth = torch.zeros(size, NODES, dtype=torch.int64)
        for node in range(1, NODES):
            depth[:, node] = depth.gather(1, parents[:, node : node + 1])[:, 0] + 1
        positions = torch.tensor(seq_lens).view(-1, 1) + depth  # [B, N]
        tokens = torch.randint(self.vocab, (size, NODES), generator=self.gen)
        mask = encode_tree_mask(parents, seq_lens, runner.tree_mask_mode)
        return runner.make_batch(
            ForwardMode.TARGET_VERIFY, input_ids=tokens.to(runner.device),
            positions=positions.to(runner.device), table_rows=table_rows, prefix_lens=seq_lens,
            extend_lens=[NODES] * size,
            out_cache_loc=runner.long(runner.host_slots(table_rows, seq_lens, NODES)),
            tree_mask=mask.to(runner.device),
        )

    def _draft_decode_batch(self, table_rows: list[int], seq_lens: list[int],
                            depth_index: int) -> tuple[ForwardBatch, torch.Tensor]:
        """Depth ``depth_index + 1``: each branch sees a random ancestor branch at every
        earlier depth, then itself (scratch layout of ``speculative.drafting``)."""
        runner, size, k = self.runner, len(table_rows), BRANCHES
        scratch = torch.tensor(runner.host_slots(table_rows, seq_lens, DRAFT_STEPS * k))
        scratch = scratch.view(size, DRAFT_STEPS, k)  # [B, S, K] slots by depth and branch
        own = scratch[:, depth_index, :]  # [B, K]
        pick = torch.randint(k, (size, k, depth_index), generator=self.gen)  # ancestor branches
        earlier = scratch[:, :depth_index, :].unsqueeze(1).expand(size, k, depth_index, k)
        ancestors = earlier.gather(3, pick.unsqueeze(3))[..., 0]  # [B, K, depth_index]
        kv_slots = torch.cat([ancestors, own.unsqueeze(2)], dim=2).view(size * k, depth_index + 1)
        positions = [s + depth_index for s in seq_lens for _ in range(k)]
        batch = runner.make_batch(
            ForwardMode.DRAFT_DECODE,
            input_ids=torch.randint(self.vocab, (size * k,), generator=self.gen).to(runner.device),
            positions=runner.long(positions), table_rows=table_rows, prefix_lens=seq_lens,
            extend_lens=[k] * size, out_cache_loc=own.reshape(-1).to(runner.device),
            draft_kv_slots=kv_slots.to(runner.device, runner.slot_dtype), num_branches=k,
        )
        return batch, self._features(size * k)

    def chain_inputs(self, table_rows: list[int], seq_lens: list[int]) -> DraftInputs:
        """A chain draft's inputs (top-1, up to ``RESERVE`` steps) as ``speculative.worker`` uploads
        them: the reserved positions as scratch, random roots, first draft tokens and draft
        hidden states."""
        runner, size = self.runner, len(table_rows)
        steps = RESERVE
        positions = [s + d for d in range(steps - 1) for s in seq_lens]  # [S - 1, B]
        table_rows_device, seq_lens_device, slots, branches, positions_device = runner.upload(
            table_rows, seq_lens, runner.host_slots(table_rows, seq_lens, RESERVE), [1] * size,
            positions,
        )
        roots, first = torch.randint(self.vocab, (2, size), generator=self.gen).to(runner.device)
        state = DraftState(torch.ones(size, 1, device=runner.device), first.view(size, 1),
                           self._features(size))
        return DraftInputs(table_rows, seq_lens, table_rows_device, seq_lens_device, branches,
                           slots.view(size, RESERVE), positions_device.view(steps - 1, size),
                           roots, state)

    def tree_inputs(self, table_rows: list[int], seq_lens: list[int]) -> DraftInputs:
        """A tree draft's inputs (top-``BRANCHES``, ``DRAFT_STEPS`` levels) as
        ``speculative.worker`` uploads them: the reserved positions as scratch, random roots, the
        root's children (random tokens, distinct random probabilities) and hidden states."""
        runner, size, topk = self.runner, len(table_rows), BRANCHES
        positions = [s + d for d in range(DRAFT_STEPS - 1) for s in seq_lens for _ in range(topk)]
        table_rows_device, seq_lens_device, slots, branches, positions_device = runner.upload(
            table_rows, seq_lens, runner.host_slots(table_rows, seq_lens, RESERVE), [topk] * size,
            positions,
        )
        roots = torch.randint(self.vocab, (size,), generator=self.gen).to(runner.device)
        ids = torch.randint(self.vocab, (size, topk), generator=self.gen).to(runner.device)
        probs = torch.softmax(torch.randn(size, topk, generator=self.gen), dim=-1)
        state = DraftState(probs.to(runner.device), ids, self._features(size))
        return DraftInputs(table_rows, seq_lens, table_rows_device, seq_lens_device, branches,
                           slots.view(size, RESERVE),
                           positions_device.view(DRAFT_STEPS - 1, size * topk), roots, state)

    def scramble_draft_kv(self, slots: torch.Tensor) -> None:
        """Random K/V at ``slots`` of every layer of the draft store: what a forward should
        overwrite."""
        store = self.runner.draft_kv
        assert store is not None
        shape = (slots.numel(), store.num_kv_heads, store.head_dim)
        for layer in range(store.num_layers):
            k, v = (torch.randn(shape, generator=self.gen).to(self.runner.device) for _ in range(2))
            store.write_kv(layer, slots.reshape(-1), k, v)

    # -- running and observing ---------------------------------------------------------------

    def run(self, batch: ForwardBatch, features: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        """The forward's outputs through the runner (a graph where one applies)."""
        if features is None:
            out = self.runner.run_target(batch)
            return (out.hidden_states, *out.aux_hidden_states)
        return (self.runner.run_draft(batch, features),)

    def run_eagerly(self, batch: ForwardBatch,
                    features: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        graphs, self.runner.graphs = self.runner.graphs, None
        try:
            return self.run(batch, features)
        finally:
            self.runner.graphs = graphs

    def kv_by_slot(self) -> torch.Tensor:
        """Every layer's K and V of both models, ``[slots, values]`` on the host."""
        parts = []
        for store in (self.runner.target_kv, self.runner.draft_kv):
            assert store is not None
            for layer in range(store.num_layers):
                for buffer in (store.k_buffer(layer), store.v_buffer(layer)):
                    by_slot = buffer if store.layout.order == "NHD" else buffer.transpose(0, 1)
                    parts.append(by_slot.reshape(store.num_slots, -1).float().cpu())
        return torch.cat(parts, dim=1)

    def assert_kv_kept(self, what: str, before: torch.Tensor, after: torch.Tensor,
                       own_slots: torch.Tensor) -> None:
        """Only ``own_slots`` and the padding page may differ between the snapshots."""
        changed = (before != after).any(dim=1)
        changed[own_slots.long().cpu()] = False
        page_size = self.runner.layout.page_size
        changed[PADDING_PAGE * page_size : (PADDING_PAGE + 1) * page_size] = False
        if bool(changed.any()):
            slots = changed.nonzero()[:, 0].tolist()
            first = slots[0]
            owner = self.owners.get(first)
            held = f"position {owner[1]} of request row {owner[0]}" if owner else "no live request"
            raise AssertionError(
                f"{what}: K/V of {len(slots)} slots outside the batch's out_cache_loc and the "
                f"padding page changed; first slot {first} (page {first // page_size}, {held})"
            )
