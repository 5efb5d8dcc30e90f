"""The model runner: the one place that turns requests into tensors and runs the models.

It owns the KV cache (allocator, request table and its device mirror, the target's and the
draft's storage over the same slots) and one attention backend per model, all obtained
from the selected ``Backend``. The worker asks it for forward batches and model passes.
With graphs on (``enable_graphs``), a model pass asks its ``GraphRunner``
(``engine.graphs.runner``) whether the forward replays from a device graph, and replays it
or runs it eagerly.
"""

from __future__ import annotations

import array
import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from eagle_hal.backend import Backend
from eagle_hal.engine.graphs import runner as graph_runner
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, slot_dtype
from eagle_hal.engine.page_allocator import PageAllocator, RequestTokenTable
from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.parallel.context import parallel_of

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.graphs.runner import GraphRunner
    from eagle_hal.hal.model_kernels import ModelKernels

__all__ = ["CacheConfig", "ModelRunner"]


@dataclasses.dataclass(frozen=True, slots=True)
class CacheConfig:
    """KV-cache sizing."""

    num_tokens: int = 16384  # KV slots in total (rounded up to whole pages)
    page_size: int = 1
    max_requests: int = 64
    max_context: int = 2048

    def __post_init__(self) -> None:
        if self.num_tokens < 1 or self.page_size < 1 or self.max_requests < 1:
            raise ValueError("num_tokens, page_size and max_requests must be >= 1")

    @property
    def num_pages(self) -> int:
        return -(-self.num_tokens // self.page_size) + 1  # + the padding page


_ROTARY_MARGIN = 64  # positions past the context the rotary table covers (padded graph rows)


def check_attention_features(
    backend: Backend, config: AttentionConfig, max_context: int
) -> AttentionConfig:
    """``config``, checked against what ``backend``'s attention applies: a soft-cap needs
    ``Capabilities.logit_softcap``; sliding windows need ``Capabilities.sliding_window``
    unless no context reaches past the smallest window (then full attention is the
    same), and are dropped from the config in that case. Raises ``ValueError`` naming the
    backend otherwise."""
    caps = backend.capabilities
    if config.logit_softcap is not None and not caps.logit_softcap:
        raise ValueError(
            f"the model soft-caps its attention scores; backend {backend.name!r} does not "
            "(Capabilities.logit_softcap)"
        )
    if config.windowed and not caps.sliding_window:
        window = min(w for w in config.layer_windows if w is not None)
        if max_context > window:
            raise ValueError(
                f"the model has sliding-window layers (window {window}); backend "
                f"{backend.name!r} does not apply windows (Capabilities.sliding_window), so "
                f"its context must stay within {window} tokens, not {max_context}"
            )
        config = dataclasses.replace(config, layer_windows=())
    return config


class ModelRunner:
    """Target model, optional draft head, their KV caches and attention backends.

    ``model_kernels``: the kernels the models' layers run (default: the backend's
    ``model_kernels()``), e.g. the backend's with a field replaced to compare variants."""

    graphs: GraphRunner | None = None  # set by enable_graphs(); None: every forward eager

    def __init__(
        self,
        backend: Backend,
        target: Any,
        draft: Any | None,
        cache: CacheConfig,
        dtype: torch.dtype,
        *,
        model_kernels: ModelKernels | None = None,
    ) -> None:
        self.backend = backend
        self.device = backend.torch_device
        # the device runs queued work while the host goes on: host copies from pinned
        # memory, read-backs through events (read once: the capabilities may be rebuilt
        # on every access)
        self.asynchronous = backend.capabilities.asynchronous
        self.target = target
        self.draft = draft
        self.dtype = dtype
        fuse_for_inference(model_kernels or backend.model_kernels(), target, draft)
        for model in (target, draft):  # cos/sin tabulated now, before any graph capture
            rotary = getattr(model, "rotary", None)
            if rotary is not None:
                rotary.prepare(dtype, cache.max_context + _ROTARY_MARGIN)
        layout = backend.kv_layout().with_page_size(cache.page_size)
        if not backend.capabilities.supports_page_size(cache.page_size):
            raise ValueError(
                f"backend {backend.name!r} does not support page size {cache.page_size}"
            )
        self.layout = layout
        self.slot_dtype = slot_dtype(layout)
        self.allocator = PageAllocator(cache.num_pages, cache.page_size)
        self.table = RequestTokenTable(self.allocator, cache.max_requests, cache.max_context)
        self.device_table = DeviceTokenTable(self.table, layout, self.device)
        # A tensor-parallel target (one carrying a ParallelContext) holds 1/world_size of
        # the heads and of their KV on this rank; the draft head runs replicated, whole.
        self.parallel = parallel_of(target)
        shards = self.parallel.world_size
        tc = target.config
        self.target_kv = KVStorage.for_allocator(
            self.allocator, num_layers=tc.num_layers,
            num_kv_heads=self.parallel.local_size(tc.num_kv_heads, "key/value heads"),
            head_dim=tc.head_dim, layout=layout, dtype=dtype, device=self.device,
        )
        self.target_attn = backend.create_attention_backend(
            check_attention_features(backend, self._attention_config(tc, self.target_kv, shards),
                                     cache.max_context)
        )
        self.draft_kv: KVStorage | None = None
        self.draft_attn: AttentionBackend | None = None
        if draft is not None:
            dc = draft.config
            self.draft_kv = KVStorage.for_allocator(
                self.allocator, num_layers=dc.num_layers, num_kv_heads=dc.num_kv_heads,
                head_dim=dc.head_dim, layout=layout, dtype=dtype, device=self.device,
            )
            self.draft_attn = backend.create_attention_backend(
                check_attention_features(backend, self._attention_config(dc, self.draft_kv),
                                         cache.max_context)
            )

    def _attention_config(self, config: Any, kv: KVStorage, shards: int = 1) -> AttentionConfig:
        return AttentionConfig(
            num_heads=config.num_heads // shards,
            num_kv_heads=config.num_kv_heads // shards,
            head_dim=config.head_dim,
            num_layers=config.num_layers,
            scaling=config.head_dim**-0.5,
            kv_store=kv,
            req_to_token=self.device_table.tensor,
            layer_windows=getattr(config, "layer_windows", ()),
            logit_softcap=getattr(config, "attn_logit_softcap", None),
        )

    @property
    def tree_mask_mode(self) -> str:
        return self.target_attn.tree_mask_mode

    # -- tensors from host lists -----------------------------------------------------------

    def long(self, values: Sequence[int] | list[list[int]]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=self.device)

    def upload(self, *lists: Sequence[int]) -> list[torch.Tensor]:
        """Several host int lists as int64 device tensors (views of one), in one
        host-to-device copy from pinned memory that does not wait for the device.

        Each view starts on a 16-byte boundary (segments padded to an even length): Triton
        specialises a kernel on whether each pointer argument is 16-byte aligned, so views
        at offsets that depend on the lists' lengths would compile new variants of the
        attention kernel mid-run, ~1 s each (the adaptive mode's catch-ups on a GPU;
        ``eagle-hal bench`` lists such compiles as ``kernels_compiled_while_timed``)."""
        values: list[int] = []
        spans = []
        for segment in lists:
            values.extend(segment)
            spans.append(len(segment))
            if len(segment) % 2:
                values.append(0)
        # allocated pinned (``Tensor.pin_memory()`` first asks the driver whether the
        # tensor is pinned: ~0.3 ms a call on an H200 host under the profiler of
        # ``benchmarks/profile_prefill.py``)
        host = torch.empty(len(values), dtype=torch.int64, pin_memory=self.asynchronous)
        if values:  # through an int64 array: a quarter of torch.tensor(list)'s time
            host.copy_(torch.frombuffer(array.array("q", values), dtype=torch.int64))
        flat = host.to(self.device, non_blocking=True)
        padded = flat.split([n + n % 2 for n in spans])
        return [view[:n] for view, n in zip(padded, spans, strict=False)]

    def slots_at(self, table_rows: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """Slots of logical ``positions`` (any shape) of table ``table_rows`` (broadcastable)."""
        return self.device_table.tensor[table_rows, positions]

    def host_slots(self, table_rows: Sequence[int], starts: Sequence[int], count: int) -> list[int]:
        """Slots of positions ``start .. start + count`` of each row, flat, from the integer
        table (no device work)."""
        return [s for row, start in zip(table_rows, starts, strict=False)
                for s in self.table.write_slots(row, start, start + count)]

    def sync_table(self) -> None:
        self.device_table.sync()

    def upload_with_table(self, *lists: Sequence[int]) -> list[torch.Tensor]:
        """``upload(*lists)`` that also brings the device table up to date (``sync_table``)
        in the same host-to-device copy."""
        writes = self.device_table.pending_writes()
        *tensors, table_rows, positions, slots = self.upload(*lists, *writes)
        self.device_table.write(table_rows, positions, slots)
        return tensors

    def make_batch(
        self,
        mode: ForwardMode,
        *,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        table_rows: Sequence[int],
        prefix_lens: Sequence[int],
        extend_lens: Sequence[int],
        out_cache_loc: torch.Tensor,
        tree_mask: torch.Tensor | None = None,
        draft_kv_slots: torch.Tensor | None = None,
        num_branches: int = 1,
        device_lens: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    ) -> ForwardBatch:
        """A forward batch. ``device_lens``: ``table_rows``, ``prefix_lens`` and ``extend_lens``
        already on the device (int64 ``[B]`` each); otherwise they are uploaded in one copy."""
        if device_lens is None:
            device_lens = tuple(self.upload(table_rows, prefix_lens, extend_lens))  # type: ignore[assignment]
        table_rows_device, prefix_lens_device, extend_lens_device = device_lens
        return ForwardBatch(
            mode=mode,
            input_ids=input_ids.reshape(-1),
            positions=positions.reshape(-1),
            table_rows=table_rows_device,
            prefix_lens=prefix_lens_device,
            extend_lens=extend_lens_device,
            out_cache_loc=out_cache_loc.reshape(-1).to(self.slot_dtype),
            prefix_lens_cpu=tuple(prefix_lens),
            extend_lens_cpu=tuple(extend_lens),
            tree_mask=tree_mask,
            draft_kv_slots=draft_kv_slots,
            num_branches=num_branches,
        )

    def causal_batch(
        self,
        mode: ForwardMode,
        input_ids: torch.Tensor | Sequence[int],
        table_rows: Sequence[int],
        prefix_lens: Sequence[int],
        extend_lens: Sequence[int],
    ) -> ForwardBatch:
        """An EXTEND / DECODE / DRAFT_EXTEND batch whose new tokens sit at logical positions
        ``prefix .. prefix + extend`` of each row (already reserved). Host ``input_ids``
        travel in the same single copy as positions, slots and lengths."""
        positions = [p + i for p, n in zip(prefix_lens, extend_lens, strict=False)
                     for i in range(n)]
        slots = [
            s for r, p, n in zip(table_rows, prefix_lens, extend_lens, strict=False)
            for s in self.table.write_slots(r, p, p + n)  # never into a shared page
        ]
        host_ids = [] if isinstance(input_ids, torch.Tensor) else list(input_ids)
        (ids_device, positions_device, slots_device, table_rows_device, prefix_lens_device,
         extend_lens_device) = self.upload(
            host_ids, positions, slots, table_rows, prefix_lens, extend_lens
        )
        return self.make_batch(
            mode,
            input_ids=input_ids if isinstance(input_ids, torch.Tensor) else ids_device,
            positions=positions_device,
            table_rows=table_rows,
            prefix_lens=prefix_lens,
            extend_lens=extend_lens,
            out_cache_loc=slots_device,
            device_lens=(table_rows_device, prefix_lens_device, extend_lens_device),
        )

    # -- model passes ----------------------------------------------------------------------

    def enable_graphs(
        self,
        buckets: Sequence[int] | None = None,
        *,
        chain_graphs: bool = True,
        tree_graphs: bool = True,
        prefill_graphs: bool = True,
    ) -> bool:
        """Serve capturable forwards from device graphs (``engine.graphs.runner``) when the
        backend offers graph capture and both attention backends support replay; returns
        whether graphs are now on. ``buckets`` defaults to ``graphs.runner.DEFAULT_BUCKETS``;
        ``chain_graphs``, ``tree_graphs`` and ``prefill_graphs`` go to the ``GraphRunner``
        (all on by default; off to compare graph modes)."""
        capture = self.backend.graph_capture()
        attns = [self.target_attn] + ([self.draft_attn] if self.draft_attn is not None else [])
        if capture is None or not all(graph_runner.supports_replay(a) for a in attns):
            self.graphs = None
            return False
        self.graphs = graph_runner.GraphRunner(
            self, capture, buckets or graph_runner.DEFAULT_BUCKETS, chain_graphs=chain_graphs,
            tree_graphs=tree_graphs, prefill_graphs=prefill_graphs,
        )
        return True

    @torch.inference_mode()
    def run_target(self, batch: ForwardBatch, aux_layers: tuple[int, ...] = ()) -> Any:
        graphs = self.graphs
        if graphs is not None and graphs.can_replay_target(batch):
            return graphs.replay_target(batch, aux_layers)
        batch.attn_metadata = self.target_attn.plan(batch)
        return self.target.forward(batch, self.target_attn, aux_layers=aux_layers)

    @torch.inference_mode()
    def run_draft(
        self, batch: ForwardBatch, hidden: torch.Tensor, *, prefill: bool = False
    ) -> torch.Tensor:
        """The draft's output hidden states ``[T, H]``. ``prefill``: an extend whose length
        varies from call to call (over a prompt, a catch-up), which no graph of its own
        length would pay for: replayed from a token bucket's graph where one fits
        (``GraphRunner.prefill_bucket``), else eager."""
        assert self.draft is not None and self.draft_attn is not None
        graphs = self.graphs
        if graphs is not None and graphs.can_replay_draft(batch, prefill=prefill):
            return graphs.replay_draft(batch, hidden, prefill=prefill)
        batch.attn_metadata = self.draft_attn.plan(batch)
        return self.draft.forward(batch, self.draft_attn, batch.input_ids, hidden)
