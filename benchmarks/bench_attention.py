"""Time one layer's paged attention on CUDA: the per-head baseline against the split kernel.

    python benchmarks/bench_attention.py [--dtype bfloat16] [--batches 1,4,16,64]
        [--contexts 128,512,2048] [--verify 6,16] [--splits 4,16 --block-keys 64]

* old: ``KVStorage.write_kv`` (two index_puts) then ``paged_attention_baseline.paged_attention``
  (one program per query token and query head, the whole context serially);
* new: ``TritonAttentionBackend.forward`` as the engine runs it: ``split_paged_attention``
  (one program per query token, KV head and key split, the KV write fused), plus the merge
  when the split count the backend chose from the shapes is above one. ``--splits`` adds
  columns with other split counts forced (and ``--block-keys`` another key tile), for
  tuning.

Geometry defaults to SmolLM2-135M's attention (9 query heads, 3 KV heads, head dim 64).
Each request has ``context`` cached tokens on shuffled 16-slot pages; decode adds one token
per request, verify N tree tokens under a random tree mask. Each variant is captured in a
CUDA graph of ``--calls`` back-to-back calls (as a model's layers run them), the graph
replayed ``--repeats`` times and timed with CUDA events; the table gives the median device
time per call in microseconds. Needs a CUDA device and Triton; exits with an error otherwise.
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys
from collections.abc import Callable

import torch
from eagle_hal.engine.kv_cache import KVStorage
from eagle_hal.hal.attention import AttentionConfig, ForwardBatch, ForwardMode
from eagle_hal.hal.kv_layout import KVLayout


def require_cuda(script: str = "bench_attention.py") -> None:
    """Exit with a message naming ``script`` unless CUDA and Triton are available."""
    if not torch.cuda.is_available():
        sys.exit(
            f"{script} needs a CUDA device: torch.cuda.is_available() is False "
            f"(torch {torch.__version__}). Run it on the GPU host."
        )
    try:
        import triton  # noqa: F401, PLC0415
    except ImportError as error:
        sys.exit(f"{script} needs Triton: {error}")


def graph_median_us(call: Callable[[], object], calls: int, repeats: int) -> float:
    """Median device time of one ``call``, from a CUDA graph of ``calls`` of them."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(3):  # compile and settle lazy state off the graph
            call()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            call()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    return statistics.median(times)


class Case:
    """One layer's KV store, table and batch for ``batch`` requests of ``context`` cached
    tokens each, plus ``tokens_per_request`` new ones (1: decode; N: verify)."""

    def __init__(self, args: argparse.Namespace, batch: int, context: int,
                 tokens_per_request: int) -> None:
        # Triton modules are imported once require_cuda has checked for Triton.
        from eagle_hal.ops.triton.attention import TritonAttentionBackend  # noqa: PLC0415

        device, dtype = torch.device("cuda"), getattr(torch, args.dtype)
        gen = torch.Generator(device=device).manual_seed(batch * 7919 + context)
        page, n = 16, tokens_per_request
        row_len = context + n
        pages_per_row = -(-row_len // page)
        num_pages = batch * pages_per_row + 1  # page 0: never handed out, as in the engine
        self.store = KVStorage(num_layers=1, num_slots=num_pages * page,
                               num_kv_heads=args.kv_heads, head_dim=args.head_dim,
                               layout=KVLayout(page_size=page), dtype=dtype, device=device)
        for buffer in (self.store.k_buffer(0), self.store.v_buffer(0)):
            buffer.copy_(torch.randn(buffer.shape, generator=gen, device=device).to(dtype))
        pages = torch.randperm(num_pages - 1, generator=gen, device=device) + 1
        pages = pages.view(batch, pages_per_row)
        offsets = torch.arange(pages_per_row * page, device=device)
        table = pages.repeat_interleave(page, dim=1) * page + offsets % page  # [B, row slots]
        self.table = table.to(torch.int64)
        config = AttentionConfig(args.heads, args.kv_heads, args.head_dim, 1,
                                 1 / math.sqrt(args.head_dim), self.store, self.table)
        self.backend = TritonAttentionBackend(config)
        mode = ForwardMode.DECODE if n == 1 else ForwardMode.TARGET_VERIFY
        tree_mask = None
        if n > 1:
            parents = [torch.randint(0, max(j, 1), (batch,), generator=gen, device=device)
                       for j in range(n)]
            tree_mask = torch.zeros(batch, n, n, dtype=torch.bool, device=device)
            for j in range(n):  # ancestors of j are ancestors of its parent, then j itself
                if j:
                    tree_mask[:, j] = tree_mask[torch.arange(batch, device=device), parents[j]]
                tree_mask[:, j, j] = True
        tokens = batch * n
        rows = torch.arange(batch, device=device)
        self.batch = ForwardBatch(
            mode=mode,
            input_ids=torch.zeros(tokens, dtype=torch.int64, device=device),
            positions=torch.zeros(tokens, dtype=torch.int64, device=device),
            table_rows=rows,
            prefix_lens=torch.full((batch,), context, device=device),
            extend_lens=torch.full((batch,), n, device=device),
            out_cache_loc=self.table[:, context : context + n].reshape(-1).contiguous(),
            prefix_lens_cpu=(context,) * batch,
            extend_lens_cpu=(n,) * batch,
            tree_mask=tree_mask,
        )
        self.batch.attn_metadata = self.backend.plan(self.batch)
        self.q = torch.randn(tokens, args.heads, args.head_dim, generator=gen,
                             device=device).to(dtype)
        self.k = torch.randn(tokens, args.kv_heads, args.head_dim, generator=gen,
                             device=device).to(dtype)
        self.v = torch.randn(tokens, args.kv_heads, args.head_dim, generator=gen,
                             device=device).to(dtype)

    def old(self) -> torch.Tensor:
        from paged_attention_baseline import paged_attention  # noqa: PLC0415

        metadata, batch = self.batch.attn_metadata, self.batch
        self.store.write_kv(0, batch.out_cache_loc, self.k, self.v)
        return paged_attention(
            self.q, self.store.k_buffer(0), self.store.v_buffer(0), "NHD", self.table,
            batch.table_rows, batch.prefix_lens, metadata.token_request,
            metadata.own_base, metadata.own_len, batch.out_cache_loc,
            batch.tree_mask if metadata.tree_width else None, metadata.tree_width,
            self.backend.config.scaling,
        )

    def new(self) -> torch.Tensor:
        return self.backend.forward(0, self.q, self.k, self.v, self.batch)

    def forced(self, num_splits: int, block_keys: int) -> Callable[[], torch.Tensor]:
        from eagle_hal.ops.triton.attention_split import split_paged_attention  # noqa: PLC0415

        metadata, batch = self.batch.attn_metadata, self.batch

        def call() -> torch.Tensor:
            return split_paged_attention(
                self.q, self.k, self.v, self.store.k_buffer(0), self.store.v_buffer(0), "NHD",
                batch.out_cache_loc, self.table, batch.table_rows, batch.prefix_lens,
                metadata.token_request, metadata.own_base, metadata.own_len, None,
                batch.tree_mask if metadata.tree_width else None, metadata.tree_width,
                self.backend.config.scaling, num_splits, block_keys=block_keys,
            )

        return call


def parse_ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16"])
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--kv-heads", type=int, default=3)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--batches", type=parse_ints, default=[1, 4, 16, 64])
    parser.add_argument("--contexts", type=parse_ints, default=[128, 512, 2048])
    parser.add_argument("--verify", type=parse_ints, default=[6, 16],
                        help="tree sizes N of the verify cases (empty: decode only)")
    parser.add_argument("--splits", type=parse_ints, default=[],
                        help="extra columns: the split kernel with this many splits forced")
    parser.add_argument("--block-keys", type=int, default=None,
                        help="key tile of the --splits columns (default: the kernel's)")
    parser.add_argument("--calls", type=int, default=30, help="calls per captured graph")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    require_cuda()
    from eagle_hal.ops.triton.attention_split import BLOCK_KEYS  # noqa: PLC0415

    block_keys = args.block_keys or BLOCK_KEYS

    forced = "".join(f" {f'split={s}':>9}" for s in args.splits)
    print(f"{torch.cuda.get_device_name()}, {args.dtype}, heads {args.heads}/{args.kv_heads}, "
          f"head_dim {args.head_dim}; median us per call over a graph of {args.calls} calls")
    print(f"{'mode':>8} {'batch':>5} {'context':>7} {'splits':>6} {'old':>9} {'new':>9} "
          f"{'speedup':>7}{forced}")
    for n in [1, *args.verify]:
        mode = "decode" if n == 1 else f"verify{n}"
        for batch in args.batches:
            for context in args.contexts:
                case = Case(args, batch, context, n)
                torch.testing.assert_close(case.new().float(), case.old().float(),
                                           atol=3e-2, rtol=3e-2)
                old = graph_median_us(case.old, args.calls, args.repeats)
                new = graph_median_us(case.new, args.calls, args.repeats)
                extra = "".join(
                    f" {graph_median_us(case.forced(s, block_keys), args.calls, args.repeats):9.2f}"
                    for s in args.splits
                )
                splits = case.batch.attn_metadata.num_splits
                print(f"{mode:>8} {batch:5d} {context:7d} {splits:6d} {old:9.2f} {new:9.2f} "
                      f"{old / new:6.2f}x{extra}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
