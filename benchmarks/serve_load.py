"""Load on `eagle-hal serve`: N concurrent streaming clients over HTTP, plain vs speculative.

For each mode (``plain``: no draft head; ``spec``: the head) a server is started in this
process on a free loopback port (or ``--url`` names one already running, measured as one
mode), and for each concurrency C, C clients stream the MT-bench first turns (each client
takes the next prompt when its stream ends) until ``--num-prompts`` have run. Reported per
(mode, C): output tokens/s over the wall time, time to first token and inter-token latency
(p50, p99, from the clients' clocks; a chunk's tokens share its interval), requests/s.

    python benchmarks/serve_load.py --device cpu --concurrency 1,4,16 --num-prompts 32 \
        --max-tokens 64 --out /tmp/serve_load.json --plot /tmp/serve_load.png
    python benchmarks/serve_load.py --tiny --concurrency 1,4 --num-prompts 8   # smoke check

``--tiny``: a tiny random model (and a head that guesses it well) on the CPU, prompts sent
as token ids: checks the harness, measures nothing meaningful.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

import httpx

DATASET = Path(__file__).parent / "data" / "mt_bench_question.jsonl"


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def one_request(http: httpx.AsyncClient, body: dict[str, Any], chat: bool) -> dict:
    path = "/v1/chat/completions" if chat else "/v1/completions"
    sent = time.perf_counter()
    stamps: list[tuple[float, int]] = []
    async with http.stream("POST", path, json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{path}: {response.status_code} {await response.aread()!r}")
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[len("data: "):])
            if "error" in event:
                raise RuntimeError(f"{path}: {event['error']}")
            for choice in event["choices"]:
                count = len(choice.get("token_ids") or [])
                if count:
                    stamps.append((time.perf_counter(), count))
    ttft = stamps[0][0] - sent if stamps else None
    itl = [(b - a) / n for (a, _), (b, n) in zip(stamps, stamps[1:], strict=False)
           for _ in range(n)]
    return {"ttft": ttft, "itl": itl, "tokens": sum(n for _, n in stamps)}


async def drive(url: str, bodies: list[dict[str, Any]], chat: bool, concurrency: int,
                api_key: str | None) -> dict[str, Any]:
    pending = list(reversed(bodies))
    results: list[dict] = []
    headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=3600, limits=limits,
                                 headers=headers) as http:
        async def client() -> None:
            while pending:
                results.append(await one_request(http, pending.pop(), chat))

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(concurrency)))
        wall = time.perf_counter() - started
    ttft = [r["ttft"] for r in results if r["ttft"] is not None]
    itl = [x for r in results for x in r["itl"]]
    tokens = sum(r["tokens"] for r in results)
    return {
        "concurrency": concurrency, "requests": len(results), "tokens": tokens,
        "seconds": round(wall, 3), "tokens_per_s": round(tokens / wall, 2),
        "requests_per_s": round(len(results) / wall, 3),
        "ttft_p50_ms": round(1e3 * percentile(ttft, 0.5), 2),
        "ttft_p99_ms": round(1e3 * percentile(ttft, 0.99), 2),
        "itl_p50_ms": round(1e3 * percentile(itl, 0.5), 2),
        "itl_p99_ms": round(1e3 * percentile(itl, 0.99), 2),
    }


def request_bodies(args: argparse.Namespace, model: str, tokenize_ids: Any) -> list[dict]:
    from eagle_hal.commands.bench_prompts import load_prompts

    prompts = load_prompts(str(args.dataset), args.num_prompts)
    while len(prompts) < args.num_prompts:  # fewer questions than requests: go round again
        prompts += prompts[: args.num_prompts - len(prompts)]
    base = {"model": model, "stream": True, "temperature": args.temperature,
            "max_tokens": args.max_tokens, "ignore_eos": args.ignore_eos,
            "return_token_ids": True}
    if tokenize_ids is not None:  # no tokenizer: completions of token ids
        return [{**base, "prompt": tokenize_ids(p)} for p in prompts]
    return [{**base, "messages": [{"role": "user", "content": p}]} for p in prompts]


def tiny_models() -> tuple[Any, Any, Any]:
    from eagle_hal import select_backend
    from eagle_hal.testing.models import matching_eagle1, near_bigram_target

    target = near_bigram_target(seed=7, vocab=97)
    return select_backend("cpu"), target, matching_eagle1(target, noise=0.02)


def build_llms(args: argparse.Namespace) -> dict[str, Any]:
    """The LLM of each mode; the plain one shares the speculative one's target."""
    from eagle_hal.api import LLM
    from eagle_hal.speculative.config import SpecConfig

    modes = args.modes.split(",")
    sizes = {"max_batch_size": max(args.concurrency), "max_context": args.max_context}
    if args.tiny:
        backend, target, head = tiny_models()
        spec = LLM.from_models(backend, target, head, None, SpecConfig(3, 1, 4), **sizes)
    else:
        spec = LLM(model=args.model, draft=args.draft, device=args.device, dtype=args.dtype,
                   **sizes)
    llms = {"spec": spec}
    if "plain" in modes:
        llms["plain"] = LLM.from_models(spec.backend, spec.target, None, spec.tokenizer,
                                        spec.spec, **sizes)
        if getattr(spec, "graphs", False):  # like for like: graphs on both sides or neither
            llms["plain"].runner.enable_graphs()
    return {mode: llms[mode] for mode in modes}


def run_mode(label: str, url: str, args: argparse.Namespace, model: str,
             tokenize_ids: Any) -> list[dict]:
    bodies = request_bodies(args, model, tokenize_ids)
    rows = []
    asyncio.run(drive(url, bodies[: max(1, min(4, len(bodies)))], tokenize_ids is None, 1,
                      args.api_key))  # warm-up: the first requests pay for the first shapes
    for concurrency in args.concurrency:
        row = {"mode": label, **asyncio.run(drive(url, bodies, tokenize_ids is None,
                                                  concurrency, args.api_key))}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for mode in sorted({r["mode"] for r in rows}):
        mine = [r for r in rows if r["mode"] == mode]
        xs = [r["concurrency"] for r in mine]
        axes[0].plot(xs, [r["tokens_per_s"] for r in mine], marker="o", label=mode)
        axes[1].plot(xs, [r["ttft_p99_ms"] for r in mine], marker="o", label=mode)
        axes[2].plot(xs, [r["itl_p99_ms"] for r in mine], marker="o", label=mode)
    for ax, title in zip(axes, ("output tokens/s", "TTFT p99 (ms)", "ITL p99 (ms)"),
                         strict=True):
        ax.set_title(title)
        ax.set_xlabel("concurrent clients")
        ax.set_xscale("log", base=2)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default=None, help="a running server (one mode, its own)")
    parser.add_argument("--model-name", default=None, help="with --url: the model to ask for")
    parser.add_argument("--api-key", default=None, help="with --url: its key")
    parser.add_argument("--tiny", action="store_true", help="a tiny random model (smoke check)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default=None)
    parser.add_argument("--model", default=None)
    parser.add_argument("--draft", default="default")
    parser.add_argument("--modes", default="plain,spec")
    parser.add_argument("--concurrency", default="1,4,16",
                        type=lambda s: [int(x) for x in s.split(",")])
    parser.add_argument("--num-prompts", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--max-context", type=int, default=2048)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--ignore-eos", action="store_true",
                        help="every request generates --max-tokens tokens")
    parser.add_argument("--dataset", type=Path, default=DATASET)
    parser.add_argument("--out", type=Path, default=None, help="write the rows as JSON")
    parser.add_argument("--plot", type=Path, default=None, help="a PNG of the rows")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    if args.url is not None:
        rows += run_mode("server", args.url.rstrip("/"), args, args.model_name or "default",
                         None)
    else:
        from eagle_hal.serve import ServeConfig, Server, create_app

        for label, llm in build_llms(args).items():
            ids = None
            if llm.tokenizer is None:
                vocab = llm.target.config.vocab_size
                def ids(text: str, vocab: int = vocab) -> list[int]:
                    return [b % vocab for b in text.encode()][:256]
            config = ServeConfig(model_names=("bench",), max_waiting=max(args.concurrency))
            server = Server(create_app(llm, config), host="127.0.0.1", port=0).start()
            try:
                rows += run_mode(label, server.url, args, "bench", ids)
            finally:
                server.shutdown()
    result = {"config": {k: (str(v) if isinstance(v, Path) else v)
                         for k, v in vars(args).items() if k != "api_key"}, "rows": rows}
    if args.out is not None:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    if args.plot is not None:
        plot(rows, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
