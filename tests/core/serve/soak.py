"""A bounded soak of the server: many streaming clients at once, random lengths, some
stop strings, some chats, a tenth cancelled mid-stream; then the books must balance.

``run_soak`` drives a running server and checks, against what the clients saw:

* every request ended as the client saw it end (``stop``, ``length``, or cancelled by the
  client), and ``/metrics`` counts exactly those ends and the prompt tokens (the oracle
  is the tokenizer, in this process) and, for the requests that finished, the tokens
  their ``usage`` reported; the cancelled requests generated between what their clients
  received and what they asked;
* afterwards nothing is left: no request running or waiting, no engine request
  remembered, no KV page in use or leaked.

It returns the latency figures (time to first token and inter-token latency, p50/p99,
measured by the clients); they are printed, never asserted on. ``tests/core/serve/
test_soak.py`` runs it on a tiny random model in the test suite; ``make soak`` runs
``python tests/core/serve/soak.py`` against the default model (SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

WORDS = ("the", "cat", "sat", "on", "a", "mat", "then", "rain", "fell", "and", "we", "ran",
         "in", "to", "an", "inn", "at", "there", "another", "tea")
STOPS = ("e", "th", "an", "n t", "at")


def _percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _body(rng: random.Random, model: str, cancel: bool, llm: Any) -> tuple[str, dict[str, Any]]:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 12)))
    body: dict[str, Any] = {"model": model, "stream": True, "temperature": 0,
                            "stream_options": {"include_usage": True},
                            "return_token_ids": True}
    chat = rng.random() < 0.5
    messages = [{"role": "user", "content": words}]
    if cancel:  # long enough that it cannot finish before its client leaves: all the room
        prompt = llm.encode(messages, chat=True) if chat else llm.encode(words)
        body.update(max_tokens=llm.scheduler.config.max_context - len(prompt), ignore_eos=True)
    else:
        body["max_tokens"] = rng.randint(1, 24)
        if rng.random() < 0.25:
            body["stop"] = [rng.choice(STOPS)]
        if rng.random() < 0.2:
            body["temperature"] = 0.8
            body["seed"] = rng.randrange(1 << 30)
    if chat:
        body["messages"] = messages
        return "/v1/chat/completions", body
    body["prompt"] = words
    return "/v1/completions", body


async def _client(http: httpx.AsyncClient, path: str, body: dict[str, Any],
                  cut_after: int | None) -> dict[str, Any]:
    seen: dict[str, Any] = {"path": path, "body": body, "ids": [], "end": None,
                            "usage": None, "times": []}
    chunks = 0
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200, await response.aread()
        async for line in response.aiter_lines():
            if not line.startswith("data: "):
                continue
            data = line[len("data: "):]
            if data == "[DONE]":
                break
            event = json.loads(data)
            assert "error" not in event, event
            if event.get("usage") is not None:
                seen["usage"] = event["usage"]
            for choice in event["choices"]:
                ids = choice.get("token_ids") or []
                if ids:
                    seen["times"].append((time.perf_counter(), len(ids)))
                seen["ids"] += ids
                if choice.get("finish_reason") is not None:
                    seen["end"] = choice["finish_reason"]
            chunks += 1
            if cut_after is not None and chunks >= cut_after:
                seen["end"] = "cancelled"
                break
    return seen


def _metrics(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    values = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return values


def run_soak(url: str, *, llm: Any, model: str, requests: int = 500, concurrency: int = 32,
             cancel_fraction: float = 0.1, seed: int = 0, loop: Any = None,
             timeout_s: float = 600.0) -> dict[str, float]:
    """Drive the server at ``url`` (serving ``llm`` in this process) and check the books
    (see the module docstring); returns the clients' latency figures."""
    rng = random.Random(seed)
    plan = []
    for _ in range(requests):
        cancel = rng.random() < cancel_fraction
        path, body = _body(rng, model, cancel, llm)
        plan.append((path, body, rng.randint(1, 3) if cancel else None))
    started = time.perf_counter()

    async def everyone() -> list[dict[str, Any]]:
        queue: asyncio.Queue[int] = asyncio.Queue()
        for i in range(len(plan)):
            queue.put_nowait(i)
        results: list[Any] = [None] * len(plan)
        limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
        async with httpx.AsyncClient(base_url=url, timeout=timeout_s, limits=limits) as http:
            async def worker() -> None:
                while not queue.empty():
                    i = queue.get_nowait()
                    path, body, cut = plan[i]
                    begun = time.perf_counter()
                    results[i] = await _client(http, path, body, cut)
                    results[i]["begun"] = begun
            await asyncio.gather(*(worker() for _ in range(concurrency)))
        return results

    results = asyncio.run(everyone())
    wall = time.perf_counter() - started
    _wait_idle(llm, loop)
    _check_books(url, llm, results, loop)
    ttft = [r["times"][0][0] - r["begun"] for r in results if r["times"]]
    itl = []
    for r in results:
        for (before, _), (after, count) in zip(r["times"], r["times"][1:], strict=False):
            itl += [(after - before) / count] * count
    return {"requests": len(results), "seconds": wall,
            "ttft_p50_s": _percentile(ttft, 0.5), "ttft_p99_s": _percentile(ttft, 0.99),
            "itl_p50_s": _percentile(itl, 0.5), "itl_p99_s": _percentile(itl, 0.99),
            "tokens": sum(len(r["ids"]) for r in results)}


def _wait_idle(llm: Any, loop: Any, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if (loop is None or loop.outstanding == 0) and not llm.engine.has_unfinished():
            return
        time.sleep(0.01)
    raise AssertionError("requests still outstanding after the soak")


def _check_books(url: str, llm: Any, results: list[dict[str, Any]], loop: Any) -> None:
    ends = Counter(r["end"] for r in results)
    assert None not in ends, "a stream ended without a finish reason"
    prompt_tokens = 0
    for r in results:
        body = r["body"]
        prompt = body.get("messages") or body["prompt"]
        prompt_tokens += len(llm.encode(prompt, chat="messages" in body))
    finished = [r for r in results if r["end"] != "cancelled"]
    cancelled = [r for r in results if r["end"] == "cancelled"]
    for r in finished:
        assert r["usage"]["completion_tokens"] == len(r["ids"]), r
    metrics = _metrics(httpx.get(f"{url}/metrics").text)  # a server without a key

    def value(name: str, **labels: str) -> float:
        return metrics.get((name, tuple(sorted(labels.items()))), 0.0)

    by_reason = {reason: value("eagle_hal_requests_total", finish_reason=reason)
                 for reason in ("stop", "length", "context_full", "cancelled", "error")}
    assert by_reason["stop"] == ends["stop"], (by_reason, ends)
    assert by_reason["length"] + by_reason["context_full"] == ends["length"], (by_reason, ends)
    assert by_reason["cancelled"] == ends["cancelled"], (by_reason, ends)
    assert by_reason["error"] == 0
    assert value("eagle_hal_prompt_tokens_total") == prompt_tokens
    generated = value("eagle_hal_generation_tokens_total")
    finished_tokens = sum(len(r["ids"]) for r in finished)
    cancelled_low = sum(len(r["ids"]) for r in cancelled)
    cancelled_high = sum(r["body"]["max_tokens"] for r in cancelled)
    assert finished_tokens + cancelled_low <= generated <= finished_tokens + cancelled_high
    for path in ("/v1/completions", "/v1/chat/completions"):
        sent = sum(1 for r in results if r["path"] == path)
        assert value("eagle_hal_http_requests_total", endpoint=path, code="200") == sent
    for gauge in ("eagle_hal_requests_running", "eagle_hal_requests_waiting",
                  "eagle_hal_requests_outstanding", "eagle_hal_kv_pages_used"):
        assert value(gauge) == 0, gauge
    assert llm.used_pages == 0 and llm.leaked_pages == 0
    assert not llm.scheduler.running and not llm.scheduler.waiting
    assert not llm.engine._requests, "the engine still remembers requests"
    if loop is not None:
        assert not loop._jobs, "the engine loop still tracks requests"


def main(argv: list[str] | None = None) -> int:
    """``make soak``: the default model on the CPU behind a server on a free loopback port."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--max-tokens-cap", type=int, default=24)
    parser.add_argument("--draft", default="default", help='"default" or "none"')
    parser.add_argument("--out", type=Path, default=None, help="write the figures as JSON")
    args = parser.parse_args(argv)
    from eagle_hal.api import LLM
    from eagle_hal.serve import ServeConfig, Server, create_app

    llm = LLM(device="cpu", draft=None if args.draft == "none" else "default",
              max_batch_size=args.concurrency, max_context=1024, progress=False)
    config = ServeConfig(model_names=("default",), max_waiting=args.requests)
    server = Server(create_app(llm, config), host="127.0.0.1", port=0).start()
    try:
        figures = run_soak(server.url, llm=llm, model="default", requests=args.requests,
                           concurrency=args.concurrency, loop=server.loop)
    finally:
        server.shutdown(timeout_s=60)
    print(json.dumps(figures, indent=2))
    if args.out is not None:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
