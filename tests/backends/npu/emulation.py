"""EMULATIONS of torch_npu operators, written from torch_npu's API reference. Not the real ops.

Nothing here has been compared with an Ascend device. Each emulation implements the
documented semantics of the subset of arguments eagle-hal's NPU backend uses, checks the
documented constraints that subset is subject to, and raises ``NotImplementedError`` for
anything outside it, so a backend change that starts relying on undocumented behaviour
fails here instead of on hardware.

* ``FusedAttentionEmulation``: ``npu_fused_infer_attention_score`` in ``BSND``/``BSH``
  layout, dense or paged (``block_table``, ``[num_blocks, block_size, H_kv * D]`` caches,
  int32 tables, block size 128 when a request has more than one query), ``atten_mask``
  with true meaning "masked", ``sparse_mode`` 0/1 (explicit mask) and 3 (right-down causal
  over the compressed 2048 x 2048 mask), GQA, ``softmax_lse_flag`` (natural-log LSE,
  ``[B, N, S, 1]`` float32). Rows past a request's query length and rows with no visible
  key come back as zeros (LSE ``-inf``): the reference leaves both unspecified.
  ``ignore_mask_in_sparse_modes`` reproduces the published defect of masks silently ignored
  in some modes, so tests can show the conformance comparison catches it.
* ``emulated_reshape_and_cache``: ``_npu_reshape_and_cache`` (int32 slots).
* ``EmulatedNpuGraphModule``: the parts of ``torch.npu`` the graph glue calls, recording
  what it is asked to do (no capture happens).
* ``HostUpdatedGraphCapture``: the core's strict ``EmulatedGraphCapture`` plus what
  ``NPUGraph.update(cpu_update_input=...)`` does: a replay's fused-attention calls see the
  host lengths of the capture, or of the last update (one dict per captured call, in order).
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import torch
from eagle_hal.testing.graphs import EmulatedGraph, EmulatedGraphCapture

__all__ = [
    "EmulatedNpuGraphModule",
    "FusedAttentionEmulation",
    "HostUpdatedGraphCapture",
    "emulated_ops",
    "emulated_reshape_and_cache",
]

_MAX_INT32 = 2147483647
_HALF_DTYPES = (torch.float16, torch.bfloat16)
_HOST_UPDATABLE = ("actual_seq_lengths", "actual_seq_lengths_kv")  # what update() refreshes
_SUPPORTED = {
    "atten_mask", "actual_seq_lengths", "actual_seq_lengths_kv", "block_table", "num_heads",
    "scale", "pre_tokens", "next_tokens", "input_layout", "num_key_value_heads", "sparse_mode",
    "block_size", "softmax_lse_flag", "inner_precise",
}


class FusedAttentionEmulation:
    """A callable with ``npu_fused_infer_attention_score``'s signature (supported subset)."""

    def __init__(
        self, *, allow_float32: bool = False, ignore_mask_in_sparse_modes: tuple[int, ...] = ()
    ) -> None:
        self.allow_float32 = allow_float32
        self.ignore_mask_in_sparse_modes = ignore_mask_in_sparse_modes
        self.calls: list[dict[str, object]] = []  # keyword arguments of every call
        self.host_overrides: list[dict[str, object]] | None = None  # set by a graph replay

    def __call__(self, query, key, value, **kwargs):
        unsupported = {k for k, v in kwargs.items() if k not in _SUPPORTED and v is not None}
        if unsupported:
            raise NotImplementedError(f"the emulation does not model {sorted(unsupported)}")
        if self.host_overrides is not None:
            if not self.host_overrides:
                raise RuntimeError("a replay made more fused calls than were captured")
            entry = self.host_overrides.pop(0)
            if set(entry) - set(kwargs):
                raise ValueError(f"update of {sorted(set(entry) - set(kwargs))}, not captured")
            kwargs = {**kwargs, **entry}
        self.calls.append(kwargs)
        layout = kwargs.get("input_layout", "BSH")
        num_heads = kwargs.get("num_heads", 1)
        num_kv_heads = kwargs.get("num_key_value_heads", 0) or num_heads
        scale = kwargs.get("scale", 1.0)
        sparse_mode = kwargs.get("sparse_mode", 0)
        mask = kwargs.get("atten_mask")
        if kwargs.get("pre_tokens", _MAX_INT32) != _MAX_INT32 or (
            kwargs.get("next_tokens", _MAX_INT32) != _MAX_INT32
        ):
            raise NotImplementedError("the emulation models only the default token band")
        if query.dtype not in _HALF_DTYPES and not (
            self.allow_float32 and query.dtype == torch.float32
        ):
            raise TypeError(f"query dtype {query.dtype} is not float16/bfloat16")
        if key.dtype != query.dtype or value.dtype != query.dtype:
            raise TypeError("query, key and value must share a dtype")
        if not query.is_contiguous():
            raise ValueError("the operator does not accept non-contiguous query tensors")
        q = _query_bsnd(query, layout, num_heads)  # [B, S, N, D]
        batch_size, max_queries, _, head_dim = q.shape
        keys, values, kv_capacity = self._kv(key, value, q, kwargs, num_kv_heads, head_dim)
        q_lens = _lengths(kwargs.get("actual_seq_lengths"), batch_size, max_queries,
                          "actual_seq_lengths")
        kv_lens = _lengths(kwargs.get("actual_seq_lengths_kv"), batch_size, kv_capacity,
                           "actual_seq_lengths_kv")
        mask_rows = _mask_reader(mask, sparse_mode, batch_size)
        out = torch.zeros(batch_size, max_queries, num_heads, head_dim, dtype=torch.float32)
        lse = torch.full((batch_size, num_heads, max_queries, 1), float("-inf"))
        group = num_heads // num_kv_heads
        for b in range(batch_size):
            q_len, kv_len = q_lens[b], kv_lens[b]
            if q_len == 0:
                continue
            k_b = keys(b, kv_len).float().repeat_interleave(group, dim=1)  # [kv_len, N, D]
            v_b = values(b, kv_len).float().repeat_interleave(group, dim=1)
            visible = torch.ones(q_len, kv_len, dtype=torch.bool)
            if sparse_mode not in self.ignore_mask_in_sparse_modes:
                visible = mask_rows(b, q_len, kv_len)
            scores = torch.einsum("qnd,knd->nqk", q[b, :q_len].float(), k_b) * scale
            scores = scores.masked_fill(~visible[None], float("-inf"))  # [N, q_len, kv_len]
            row_lse = torch.logsumexp(scores, dim=-1)  # [N, q_len]
            weights = torch.exp(scores - row_lse.nan_to_num(neginf=0.0)[..., None])
            weights = torch.where(torch.isfinite(row_lse)[..., None], weights, 0.0)
            out[b, :q_len] = torch.einsum("nqk,knd->qnd", weights, v_b)
            lse[b, :, :q_len, 0] = row_lse
        out = out.to(query.dtype).to(query.device)
        if layout == "BSH":
            out = out.reshape(batch_size, max_queries, num_heads * head_dim)
        if kwargs.get("softmax_lse_flag", False):
            return out, lse.to(query.device)
        return out, torch.zeros(1, device=query.device)

    def _kv(self, key, value, q, kwargs, num_kv_heads, head_dim):
        """Readers ``(b, kv_len) -> [kv_len, H_kv, D]`` for dense or paged K/V, and the
        default KV length."""
        table = kwargs.get("block_table")
        if table is None:
            k, v = _query_bsnd(key, kwargs.get("input_layout", "BSH"), num_kv_heads), None
            v = _query_bsnd(value, kwargs.get("input_layout", "BSH"), num_kv_heads)
            return (lambda b, n: k[b, :n]), (lambda b, n: v[b, :n]), k.shape[1]
        if table.dtype != torch.int32:
            raise TypeError(f"block_table must be int32, got {table.dtype}")
        if key.dim() != 3 or key.shape != value.shape:
            raise NotImplementedError("the emulation models paged K/V as [blocks, block_size, H]")
        block_size = kwargs.get("block_size", 0)
        if block_size != key.shape[1]:
            raise ValueError(f"block_size {block_size} != the caches' {key.shape[1]}")
        if block_size % 16 or block_size > 512:
            raise ValueError(f"block_size must be a multiple of 16 up to 512, got {block_size}")
        if q.shape[1] > 1 and block_size != 128:
            raise ValueError("paged attention with more than one query token needs block_size 128")
        if kwargs.get("actual_seq_lengths_kv") is None:
            raise ValueError("paged attention needs actual_seq_lengths_kv")
        if key.shape[2] != num_kv_heads * head_dim:
            raise ValueError(f"cache width {key.shape[2]} != H_kv * D = {num_kv_heads * head_dim}")

        def reader(cache):
            def read(b, n):
                positions = torch.arange(n)
                blocks = table[b].long().cpu()[positions // block_size]
                rows = cache[blocks.to(cache.device), (positions % block_size).to(cache.device)]
                return rows.view(n, num_kv_heads, head_dim).cpu()

            return read

        return reader(key), reader(value), table.shape[1] * block_size


def _query_bsnd(tensor, layout, num_heads):
    if layout == "BSND":
        return tensor.cpu()
    if layout == "BSH":
        b, s, h = tensor.shape
        return tensor.cpu().view(b, s, num_heads, h // num_heads)
    raise NotImplementedError(f"the emulation models BSND and BSH layouts, not {layout}")


def _lengths(values, batch_size, default, name):
    if values is None:
        return [default] * batch_size
    values = [int(x) for x in (values.tolist() if torch.is_tensor(values) else values)]
    if len(values) != batch_size or any(x < 0 or x > default for x in values):
        raise ValueError(f"{name}={values} does not fit a batch of {batch_size} up to {default}")
    return values


def _mask_reader(mask, sparse_mode, batch_size):
    """``(b, q_len, kv_len) -> visible [q_len, kv_len]`` for the sparse mode."""
    if mask is not None and mask.dtype not in (torch.bool, torch.int8, torch.uint8):
        raise TypeError(f"atten_mask must be bool/int8/uint8, got {mask.dtype}")
    if sparse_mode == 3:
        if mask is None or tuple(mask.shape) != (2048, 2048):
            raise ValueError("sparse_mode 3 needs the compressed 2048 x 2048 atten_mask")
        expected = torch.triu(torch.ones(2048, 2048, dtype=torch.bool), diagonal=1)
        if not torch.equal(mask.cpu().bool(), expected):
            raise ValueError("sparse_mode 3's atten_mask must be upper-triangular (triu, 1)")

        def causal(b, q_len, kv_len):  # query i sees keys up to kv_len - q_len + i
            rows = torch.arange(q_len)[:, None] + (kv_len - q_len)
            return torch.arange(kv_len)[None, :] <= rows

        return causal
    if sparse_mode not in (0, 1):
        raise NotImplementedError(f"the emulation models sparse_mode 0, 1 and 3, not {sparse_mode}")
    if mask is None:
        if sparse_mode == 1:
            raise ValueError("sparse_mode 1 needs an explicit atten_mask")
        return lambda b, q_len, kv_len: torch.ones(q_len, kv_len, dtype=torch.bool)
    full = mask.cpu().bool()
    if full.dim() == 2:
        full = full[None, None]
    elif full.dim() == 3:
        full = full[:, None]
    if full.dim() != 4 or full.shape[0] not in (1, batch_size) or full.shape[1] != 1:
        raise ValueError(f"atten_mask shape {tuple(mask.shape)} is not (B|1)[,1],Q_S,KV_S")

    def explicit(b, q_len, kv_len):
        block = full[b if full.shape[0] > 1 else 0, 0]
        if block.shape[0] < q_len or block.shape[1] < kv_len:
            raise ValueError(f"atten_mask {tuple(block.shape)} smaller than ({q_len}, {kv_len})")
        return ~block[:q_len, :kv_len]  # true in the mask: not attended

    return explicit


def emulated_reshape_and_cache(*, key, value, key_cache, value_cache, slot_indices):
    """``_npu_reshape_and_cache``: ``key``/``value`` ``[T, H_kv, D]`` into the
    ``[num_blocks, block_size, H_kv, D]`` caches at int32 ``slot_indices`` ``[T]``."""
    if slot_indices.dtype != torch.int32:
        raise TypeError(f"slot_indices must be int32, got {slot_indices.dtype}")
    if key_cache.dim() != 4 or key.shape[1:] != key_cache.shape[2:]:
        raise ValueError(f"key {tuple(key.shape)} does not fit cache {tuple(key_cache.shape)}")
    if key.dtype != key_cache.dtype or value.dtype != value_cache.dtype:
        raise TypeError("key/value must have the caches' dtype")
    if slot_indices.shape != (key.shape[0],):
        raise ValueError(f"slot_indices {tuple(slot_indices.shape)} for {key.shape[0]} tokens")
    slots = slot_indices.long()
    key_cache.view(-1, *key_cache.shape[2:])[slots] = key
    value_cache.view(-1, *value_cache.shape[2:])[slots] = value


def emulated_ops(**options):
    """``NpuOps`` over the emulations (``options`` go to ``FusedAttentionEmulation``)."""
    from eagle_hal_npu.ops import NpuOps

    return NpuOps(FusedAttentionEmulation(**options), emulated_reshape_and_cache)


class HostUpdatedGraph(EmulatedGraph):
    """An ``EmulatedGraph`` whose fused-attention calls take ``cpu_update_input`` entries."""

    def __init__(self, fused: FusedAttentionEmulation) -> None:
        super().__init__()
        self.fused = fused
        self.captured_calls = 0  # fused calls the captured body made
        self.host_values: list[dict[str, object]] | None = None  # the last update, kept

    def replay(self, host_updates=None):
        """Apply ``host_updates["cpu_update_input"]`` (kept for later replays, as
        ``NPUGraph.update`` does), then replay with each captured call seeing its entry."""
        if host_updates:
            if set(host_updates) != {"cpu_update_input"}:
                raise KeyError(
                    f"NPU host updates go under cpu_update_input: {sorted(host_updates)}"
                )
            self.host_values = self._checked(host_updates["cpu_update_input"])
        self.fused.host_overrides = None if self.host_values is None else list(self.host_values)
        try:
            super().replay()
            left = self.fused.host_overrides
        finally:
            self.fused.host_overrides = None
        if left:
            raise RuntimeError(f"a replay made {len(left)} fewer fused calls than were captured")

    def _checked(self, entries):
        if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
            raise TypeError("cpu_update_input must be a list of dicts, one per captured op")
        if len(entries) != self.captured_calls:
            raise ValueError(
                f"cpu_update_input has {len(entries)} entries for {self.captured_calls} "
                "captured fused-attention calls"
            )
        for entry in entries:
            unknown = set(entry) - set(_HOST_UPDATABLE)
            if unknown:
                raise ValueError(f"cpu_update_input entries cannot update {sorted(unknown)}")
        return [dict(entry) for entry in entries]


class HostUpdatedGraphCapture(EmulatedGraphCapture):
    """``EmulatedGraphCapture`` with NPU-style host updates of ``fused``'s calls."""

    def __init__(self, fused: FusedAttentionEmulation) -> None:
        self.fused = fused

    def new_graph(self) -> HostUpdatedGraph:
        return HostUpdatedGraph(self.fused)

    def record(self, graph, body):
        """Record as the core's emulation does, counting the fused calls captured."""
        before = len(self.fused.calls)
        result = super().record(graph, body)
        graph.captured_calls = len(self.fused.calls) - before
        return result


class EmulatedNpuGraph:
    """Records ``update`` payloads and replays, in order, into ``log``."""

    def __init__(self, log: list) -> None:
        self.log = log

    def update(self, *, cpu_update_input):
        if not isinstance(cpu_update_input, list) or not all(
            isinstance(entry, dict) for entry in cpu_update_input
        ):
            raise TypeError("cpu_update_input must be a list of dicts, one per captured op")
        self.log.append(("update", cpu_update_input))

    def replay(self):
        self.log.append(("replay",))


class EmulatedNpuGraphModule(SimpleNamespace):
    """Stands in for ``torch.npu``'s graph API: NPUGraph, graph(), graph_pool_handle()."""

    def __init__(self) -> None:
        log: list = []
        super().__init__(log=log)
        self.NPUGraph = lambda: EmulatedNpuGraph(log)
        self.graph_pool_handle = lambda: ("pool",)
        self.Stream = lambda: ("side stream",)

        @contextlib.contextmanager
        def graph(npu_graph, pool=None, stream=None, auto_dispatch_capture=False):
            log.append(("capture", npu_graph, pool, auto_dispatch_capture))
            yield

        @contextlib.contextmanager
        def stream(s):
            log.append(("stream", s))
            yield

        self.graph = graph
        self.stream = stream
