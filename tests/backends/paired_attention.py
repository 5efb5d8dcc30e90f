"""The same paged KV state behind a vendor attention adapter and the core's reference
attention: the oracle of the adapter tests (aiter on ROCm, mate on MUSA).

Two identical KV stores over one page table whose requests grew interleaved (so no
request's pages are contiguous) and whose batch order differs from the table's row order;
the adapter (with the reference as its fallback) reads one, ``TorchAttentionBackend`` (slot
gathers and SDPA) the other."""

from __future__ import annotations

from collections.abc import Callable

import torch
from eagle_hal.engine.kv_cache import DeviceTokenTable, KVStorage, PageAllocator, RequestTokenTable
from eagle_hal.hal.attention import AttentionBackend, AttentionConfig, ForwardBatch
from eagle_hal.hal.kv_layout import KVLayout
from eagle_hal.ops.attention_reference import TorchAttentionBackend

LAYERS = 2


class PairedAttention:
    """``adapter(config, fallback)`` builds the backend under test."""

    def __init__(self, adapter: Callable[[AttentionConfig, AttentionBackend], AttentionBackend],
                 prefix_lens, *, page_size=16, heads=8, kv_heads=2, head_dim=64,
                 dtype=torch.bfloat16, reserve=4, seed=0, run_seed=0):
        torch.manual_seed(seed)
        self.heads, self.kv_heads, self.head_dim, self.dtype = heads, kv_heads, head_dim, dtype
        self.run_seed = run_seed
        layout = KVLayout(page_size=page_size)
        allocator = PageAllocator(num_pages=4096 // page_size, page_size=page_size)
        table = RequestTokenTable(allocator, max_requests=8, max_context=1024)
        rows = [table.add_request() for _ in prefix_lens]
        for step in range(1, 5):  # interleaved growth: a request's pages are not contiguous
            for row, p in zip(rows, prefix_lens, strict=True):
                table.reserve(row, (p + reserve) * step // 4)
        self.rows = rows[::-1]  # batch order differs from table-row order
        self.prefix_lens = tuple(prefix_lens[::-1])
        device_table = DeviceTokenTable(table, layout, "cpu")
        device_table.sync()
        self.req_to_token = device_table.tensor
        stores = [KVStorage.for_allocator(allocator, num_layers=LAYERS, num_kv_heads=kv_heads,
                                          head_dim=head_dim, layout=layout, dtype=dtype,
                                          device="cpu") for _ in range(2)]
        for layer in range(LAYERS):
            for get in ("k_buffer", "v_buffer"):
                noise = torch.randn(getattr(stores[0], get)(layer).shape)
                for store in stores:
                    getattr(store, get)(layer).copy_(noise)
        configs = [AttentionConfig(heads, kv_heads, head_dim, LAYERS, head_dim**-0.5, store,
                                   self.req_to_token) for store in stores]
        self.adapter = adapter(configs[0], TorchAttentionBackend(configs[0]))
        self.reference = TorchAttentionBackend(configs[1])

    def batch(self, mode, extend_lens, prefix_lens=None, **extra) -> ForwardBatch:
        """A batch of ``extend_lens`` new tokens per request after ``prefix_lens`` (default
        the pair's), at the slots the page table gives them."""
        prefix_lens = self.prefix_lens if prefix_lens is None else tuple(prefix_lens)
        out = torch.cat([self.req_to_token[r, p:p + n].long()
                         for r, p, n in zip(self.rows, prefix_lens, extend_lens, strict=True)])
        positions = torch.cat([torch.arange(p, p + n)
                               for p, n in zip(prefix_lens, extend_lens, strict=True)])
        return ForwardBatch(
            mode=mode, input_ids=torch.zeros(len(out), dtype=torch.long), positions=positions,
            table_rows=torch.tensor(self.rows), prefix_lens=torch.tensor(prefix_lens),
            extend_lens=torch.tensor(extend_lens), out_cache_loc=out,
            prefix_lens_cpu=prefix_lens, extend_lens_cpu=tuple(extend_lens), **extra,
        )

    def qkv(self, tokens, seed):
        gen = torch.Generator().manual_seed(seed)
        return (torch.randn(tokens, self.heads, self.head_dim, generator=gen).to(self.dtype),
                torch.randn(tokens, self.kv_heads, self.head_dim, generator=gen).to(self.dtype),
                torch.randn(tokens, self.kv_heads, self.head_dim, generator=gen).to(self.dtype))

    def run(self, backend, batch, capture=False) -> torch.Tensor:
        """Every layer's output ``[LAYERS, T, H, D]`` (float32), layer ``l`` fed the q/k/v of
        seed ``run_seed + l``; planned for capture when ``capture``."""
        plan = backend.plan_for_capture if capture else backend.plan
        batch.attn_metadata = plan(batch)
        return torch.stack([
            backend.forward(layer, *self.qkv(batch.num_tokens, self.run_seed + layer), batch)
            for layer in range(LAYERS)]).float()

    def assert_agree(self, batch, capture=False) -> None:
        """The adapter's outputs equal the reference's, and the new K/V landed in the same
        slots of both stores."""
        got, expected = self.run(self.adapter, batch, capture), self.run(self.reference, batch)
        torch.testing.assert_close(got, expected, atol=2e-2, rtol=2e-2)
        for layer in range(LAYERS):
            assert torch.equal(self.adapter.config.kv_store.k_buffer(layer),
                               self.reference.config.kv_store.k_buffer(layer))
