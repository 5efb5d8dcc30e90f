"""The soak (``soak.py``) on a tiny random model: 500 streaming requests from 32 clients at
once, a tenth cancelled mid-stream, speculative decoding with overlap on. The latency
figures are printed (``-s`` shows them), not asserted on."""

from __future__ import annotations

from serving import MODEL, make_llm, start_server
from soak import run_soak


def test_500_requests_from_32_clients_leave_nothing_behind(cpu_backend, models, byte_tokenizer):
    llm = make_llm(cpu_backend, models, byte_tokenizer, overlap=True, max_batch_size=32)
    with start_server(llm, max_waiting=1000) as running:
        figures = run_soak(running.url, llm=llm, model=MODEL, requests=500, concurrency=32,
                           loop=running.loop)
    print(f"\nsoak: {figures['requests']} requests, {figures['tokens']} tokens in "
          f"{figures['seconds']:.1f} s; TTFT p50 {figures['ttft_p50_s'] * 1e3:.1f} ms, "
          f"p99 {figures['ttft_p99_s'] * 1e3:.1f} ms; ITL p50 {figures['itl_p50_s'] * 1e3:.1f} "
          f"ms, p99 {figures['itl_p99_s'] * 1e3:.1f} ms")
