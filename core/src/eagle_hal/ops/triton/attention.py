"""``TritonAttentionBackend``: paged attention in our own Triton kernel, every forward mode.

Shared by the CUDA, ROCm and XPU backends (and, interpreted, the CPU tests). Planning turns
the host lengths of a batch into three per-token index tensors (which request a token
belongs to, where its own run of keys starts and how long it is) and the number of key
splits; the kernel (``attention_split.split_paged_attention``) reads the prefix
lengths and table rows from the batch's device tensors. So the metadata depends only on the
batch's *shape*: it is cached per shape for uniform batches (decode, verify, draft decode,
equal-length extends), and a captured graph replays with new lengths, rows and slots
without any metadata refresh. The one exception: a causal extend captured once per token
bucket (the graph runner's prefill graphs) replays for any requests whose new tokens fill
the bucket, and its per-token runs are rebuilt on the host and copied in before the replay.

Every mode runs on the split kernel, which also writes the forward's K/V into the cache
(its split-0 programs store them at ``out_cache_loc``; the own run is read from the ``k``/
``v`` inputs), so ``forward`` is one launch, two when the keys are split. The KV store's
``write_kv`` is not called: the kernel writes ``k_buffer``/``v_buffer`` directly, rounding
to their dtype as ``write_kv`` does.

A layer's sliding window and the score soft-cap (``AttentionConfig``) go to the kernel with
the batch's positions, read when the kernel runs (so a graph replays with new ones).

Tree masks are read in ``TREE_BLOCK`` layout: bool ``[B, N, N]``, row ``i`` column ``j``
true when node ``i`` sees node ``j``; the cached prefix is always visible.
"""

from __future__ import annotations

import dataclasses

import torch

from eagle_hal.hal.attention import (
    AttentionBackend,
    AttentionConfig,
    AttentionMetadata,
    ForwardBatch,
    ForwardMode,
)
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.triton.attention_split import (
    SplitPartials,
    choose_num_splits,
    split_paged_attention,
)

__all__ = ["TritonAttentionBackend", "TritonAttentionMetadata"]

_MAX_CACHED_SHAPES = 256  # uniform batch shapes whose metadata is kept
# modes a captured graph may replay with other per-request lengths (ragged_extend_graphs)
_RAGGED_MODES = frozenset({ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND})


@dataclasses.dataclass
class TritonAttentionMetadata(AttentionMetadata):
    """Per-token key-run description of one batch shape (int32 tensors on the device)."""

    token_request: torch.Tensor  # [T] request of each token
    own_base: torch.Tensor  # [T] index of the token's first own key (token or draft slot)
    own_len: torch.Tensor  # [T] own keys the token may read
    tree_width: int  # N in TARGET_VERIFY, else 0
    shape_key: tuple[object, ...]  # what the metadata was planned for
    num_splits: int  # key splits per (token, KV head), from the shape only
    partials: SplitPartials | None  # views of the backend's split scratch (num_splits > 1)
    runs: torch.Tensor | None = None  # [3, T rounded up to 4]: the three above are its rows


class _SplitScratch:
    """One float32 buffer for the per-split partial results, viewed by every planned shape.

    A backend's forwards run in stream order, so all layers and all shapes can share it.
    It grows (to a power of two) when a shape needs more; metadata planned earlier keeps
    its views of the old buffer alive, so graphs captured with them stay valid.
    """

    def __init__(self, num_heads: int, head_dim: int, device: torch.device) -> None:
        self._heads, self._dim, self._device = num_heads, head_dim, device
        self._buffer = torch.empty(0, dtype=torch.float32, device=device)

    def partials(self, num_tokens: int, num_splits: int) -> SplitPartials | None:
        """Views ``[T, H, S, D]`` and ``[T, H, S]`` for ``num_splits`` splits; ``None`` for
        one split (the kernel then writes its output directly)."""
        if num_splits == 1:
            return None
        rows = num_tokens * self._heads * num_splits
        needed = rows * (self._dim + 1)
        if self._buffer.numel() < needed:
            size = 1 << (needed - 1).bit_length()
            self._buffer = torch.empty(size, dtype=torch.float32, device=self._device)
        out = self._buffer[: rows * self._dim].view(num_tokens, self._heads, num_splits, self._dim)
        lse = self._buffer[rows * self._dim : needed].view(num_tokens, self._heads, num_splits)
        return SplitPartials(out, lse)


class TritonAttentionBackend(AttentionBackend):
    """Attention through ``split_paged_attention`` for every ``ForwardMode``; capturable.

    ``forward`` queues one kernel launch per layer (plus a merge when the keys are split),
    which writes the KV too, and never reads a device value on the host. Graph hooks:
    metadata is a function of the batch shape, so ``plan_for_replay`` only checks the shape,
    except for ragged causal extends (``ragged_extend_graphs``), whose per-token runs it
    rewrites. Several forwards may share a graph: forwards of one uniform shape share
    their metadata, which no replay writes (a captured causal extend gets its own); the
    split scratch is shared too: forwards run in stream order.

    ``fp32_dot``: float32 dot operands for 16-bit caches as well (slower; to measure what
    16-bit operands cost in accuracy, ``split_paged_attention``).
    """

    tree_mask_mode = TreeMaskMode.TREE_BLOCK
    multi_forward_graphs = True
    draft_slots_read_in_forward = True  # the kernel reads them; the hooks check shapes only
    ragged_extend_graphs = True  # a causal extend's per-token runs are rebuilt on replay
    lengths_read_in_forward = True  # plans read extend lengths and shapes, never prefixes

    def __init__(self, config: AttentionConfig, *, fp32_dot: bool = False) -> None:
        super().__init__(config)
        self.fp32_dot = fp32_dot
        self._device = config.req_to_token.device
        self._cache: dict[tuple[object, ...], TritonAttentionMetadata] = {}
        self._scratch = _SplitScratch(config.num_heads, config.head_dim, self._device)

    # -- planning ------------------------------------------------------------------------

    def plan(self, batch: ForwardBatch) -> TritonAttentionMetadata:
        """Per-token key runs for ``batch``, from its host lengths only. Raises
        ``ValueError`` for a batch inconsistent with its mode."""
        key = self._shape_key(batch)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        metadata = self._build(batch, key)
        if self._is_uniform(batch) and len(self._cache) < _MAX_CACHED_SHAPES:
            self._cache[key] = metadata
        return metadata

    @staticmethod
    def _shape_key(batch: ForwardBatch) -> tuple[object, ...]:
        depth = batch.draft_kv_slots.shape[1] if batch.draft_kv_slots is not None else 0
        return (batch.mode, batch.extend_lens_cpu, batch.num_branches, depth)

    @staticmethod
    def _is_uniform(batch: ForwardBatch) -> bool:
        lens = batch.extend_lens_cpu
        return all(n == lens[0] for n in lens)

    def _build(self, batch: ForwardBatch, key: tuple[object, ...]) -> TritonAttentionMetadata:
        mode, lens = batch.mode, batch.extend_lens_cpu
        if sum(lens) != batch.num_tokens:
            raise ValueError(
                f"{mode.value}: {batch.num_tokens} tokens but extend_lens {lens} sum to "
                f"{sum(lens)}"
            )
        token_request: list[int]
        own_base: list[int]
        own_len: list[int]
        tree_width = 0
        if mode is ForwardMode.DRAFT_DECODE:
            depth = self._check_draft_decode(batch)
            token_request = [t // batch.num_branches for t in range(batch.num_tokens)]
            own_base = [t * depth for t in range(batch.num_tokens)]
            own_len = [depth] * batch.num_tokens
        else:
            if mode is ForwardMode.TARGET_VERIFY:
                tree_width = self._check_verify(batch)
            # (list arithmetic: torch's CPU repeat_interleave takes 2-4 ms for 1,600 tokens
            # on an H200 host, more than the replay: ``benchmarks/profile_prefill.py``)
            token_request, own_base, own_len = [], [], []
            start = 0
            for request, n in enumerate(lens):
                token_request += [request] * n
                own_base += [start] * n
                # causal: the request's new tokens up to this one; verify: all N nodes
                own_len += [n] * n if tree_width else range(1, n + 1)
                start += n

        # one copy from pinned memory, which does not wait for the device (from pageable
        # memory a copy waits for the stream); rows of a multiple of 4 keep every row
        # 16-byte aligned (Triton specialises kernels on it)
        tokens = batch.num_tokens
        width = -(-tokens // 4) * 4
        pad = [0] * (width - tokens)
        values = torch.tensor([token_request + pad, own_base + pad, own_len + pad],
                              dtype=torch.int32)
        host = torch.empty(3, width, dtype=torch.int32, pin_memory=self._device.type != "cpu")
        host.copy_(values)
        runs = host.to(self._device, non_blocking=True)
        num_splits = choose_num_splits(
            tokens, self.config.num_kv_heads, self.config.req_to_token.shape[1]
        )
        return TritonAttentionMetadata(
            runs[0, :tokens], runs[1, :tokens], runs[2, :tokens], tree_width, key, num_splits,
            self._scratch.partials(tokens, num_splits), runs,
        )

    @staticmethod
    def _check_draft_decode(batch: ForwardBatch) -> int:
        if batch.draft_kv_slots is None:
            raise ValueError("draft_decode needs batch.draft_kv_slots [B * K, depth]")
        if batch.draft_kv_slots.shape[0] != batch.num_tokens:
            raise ValueError(
                f"draft_kv_slots has {batch.draft_kv_slots.shape[0]} rows, expected one per "
                f"token ({batch.num_tokens} = batch_size * num_branches)"
            )
        if any(n != batch.num_branches for n in batch.extend_lens_cpu):
            raise ValueError(
                f"draft_decode needs num_branches ({batch.num_branches}) tokens per request, "
                f"got {batch.extend_lens_cpu}"
            )
        return int(batch.draft_kv_slots.shape[1])

    @staticmethod
    def _check_verify(batch: ForwardBatch) -> int:
        if batch.tree_mask is None:
            raise ValueError("target_verify needs batch.tree_mask (tree_block layout [B, N, N])")
        lens = batch.extend_lens_cpu
        n = lens[0] if lens else 0
        if any(length != n for length in lens):
            raise ValueError(
                f"target_verify needs the same number of tree tokens per request, got {lens}"
            )
        if batch.tree_mask.numel() != batch.batch_size * n * n:
            raise ValueError(
                f"tree_block mask has {batch.tree_mask.numel()} elements, expected B*N*N = "
                f"{batch.batch_size}*{n}*{n}"
            )
        return n

    def warm_up_lengths(self) -> tuple[int, ...]:
        """The smallest token count of each split count ``choose_num_splits`` can pick
        (a compile-time constant of the kernel)."""
        first: dict[int, int] = {}
        width = self.config.req_to_token.shape[1]
        for tokens in range(1, width + 1):
            splits = choose_num_splits(tokens, self.config.num_kv_heads, width)
            first.setdefault(splits, tokens)
            if splits == 1:
                break
        return tuple(sorted(first.values()))

    # -- graph hooks -----------------------------------------------------------------------

    def plan_for_capture(self, batch: ForwardBatch) -> TritonAttentionMetadata:
        """The shape's metadata; its tensors outlive the capture. Cached (shared with eager
        forwards of the shape) except for extends (EXTEND, DRAFT_EXTEND), whose per-token
        runs a ragged replay rewrites in place (``plan_for_replay``)."""
        if batch.mode in _RAGGED_MODES:
            return self._build(batch, self._shape_key(batch))
        return self.plan(batch)

    def plan_for_replay(self, batch: ForwardBatch, metadata: AttentionMetadata) -> None:
        """Nothing to refresh for a batch of the captured shape (lengths and rows are read
        from the batch's device tensors). An extend captured as ``B`` requests of
        ``T`` tokens in all may replay with other lengths over ``B`` requests summing to
        ``T`` (``ragged_extend_graphs``): its per-token runs are rebuilt and copied in
        place. Raises ``ValueError`` for any other change of shape."""
        if not isinstance(metadata, TritonAttentionMetadata):
            raise TypeError(f"metadata from another backend: {type(metadata).__name__}")
        key = self._shape_key(batch)
        if key == metadata.shape_key:
            return
        captured_lens = metadata.shape_key[1]
        assert isinstance(captured_lens, tuple)
        lens = batch.extend_lens_cpu
        if (
            batch.mode not in _RAGGED_MODES
            or key[0] != metadata.shape_key[0]
            or len(lens) != len(captured_lens)
            or sum(lens) != sum(captured_lens)
            or key[2:] != metadata.shape_key[2:]
            or any(metadata is cached for cached in self._cache.values())
        ):
            raise ValueError(
                f"replay batch shape {key} differs from the captured shape "
                f"{metadata.shape_key}"
            )
        fresh = self._build(batch, key)
        assert metadata.runs is not None and fresh.runs is not None
        metadata.runs.copy_(fresh.runs)  # the three per-token runs in one copy
        metadata.shape_key = key  # the tensors now hold this layout

    # -- per layer -------------------------------------------------------------------------

    def forward(
        self,
        layer: int,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        batch: ForwardBatch,
    ) -> torch.Tensor:
        """Write ``k``/``v`` ``[T, H_kv, D]`` at ``out_cache_loc``, attend with ``q``
        ``[T, H, D]`` as ``batch.mode`` prescribes; returns ``[T, H, D]`` in ``q.dtype``."""
        metadata = self.planned_metadata(batch, TritonAttentionMetadata)
        store = self.config.kv_store
        ancestor_slots = None
        if batch.mode is ForwardMode.DRAFT_DECODE:
            assert batch.draft_kv_slots is not None
            ancestor_slots = batch.draft_kv_slots.reshape(-1).contiguous()
        tree_mask = batch.tree_mask if metadata.tree_width else None
        return split_paged_attention(
            q,
            k,
            v,
            store.k_buffer(layer),
            store.v_buffer(layer),
            store.layout.order,
            batch.out_cache_loc.contiguous(),
            self.config.req_to_token,
            batch.table_rows,
            batch.prefix_lens,
            metadata.token_request,
            metadata.own_base,
            metadata.own_len,
            ancestor_slots,
            tree_mask.contiguous() if tree_mask is not None else None,
            metadata.tree_width,
            self.config.scaling,
            metadata.num_splits,
            metadata.partials,
            fp32_dot=self.fp32_dot,
            window=self.config.window(layer),
            positions=batch.positions,
            softcap=self.config.logit_softcap,
        )
