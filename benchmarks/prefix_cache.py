"""Prefix caching on and off: a growing conversation and a batch sharing a system prompt.

    python benchmarks/prefix_cache.py [--device cpu] [--turns 10] [--requests 64]
        [--system-tokens 1000] [--out results.json]

* conversation: ``--turns`` turns, each prompt the previous prompt, its answer
  (``--answer-tokens``, greedy) and a new user message of ``--user-tokens`` tokens, growing
  to about 1,500 tokens with the defaults (``max_context`` 4,096). Reported: the time to
  first token of every turn (the last is the headline: with the cache on its prefill runs
  only over the new message), cache on and off.
* shared prefix: ``--requests`` requests of a ``--system-tokens`` system prompt and a short
  question each, generated as one batch (``--max-tokens`` tokens each): the total time,
  cache on and off.

Both engines run the same model (``LLM(device=...)``'s default model and head unless
``--model`` / ``--draft`` say otherwise). In float32 both produce the same greedy tokens
(checked, reported as ``same_tokens``); ``match_rate`` is the share of requests whose
tokens agree (in bf16 they may part). The JSON report (stdout, or ``--out``) holds the
figures, the prefix cache's counters and the settings.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from typing import Any

import torch
from eagle_hal import LLM, SamplingParams

_WORDS = ("the river keeps a slow account of every stone it passes and the town beside it "
          "counts the bridges twice when the lamps are lit in autumn").split()


def filler(llm: LLM, tokens: int, salt: int) -> list[int]:
    """About ``tokens`` token ids of plain English text, different for each ``salt``."""
    words = [_WORDS[(salt * 7 + i * 3) % len(_WORDS)] for i in range(tokens)]
    ids = llm.encode(f"Note {salt}: " + " ".join(words))
    while len(ids) < tokens:
        ids = ids + ids
    return ids[:tokens]


def set_cache(llm: LLM, enabled: bool) -> None:
    """Turn the prefix cache on (empty) or off between runs (nothing runs meanwhile)."""
    llm.runner.allocator.enable_prefix_cache(enabled)


def conversation(llm: LLM, args: argparse.Namespace) -> dict[str, Any]:
    params = SamplingParams(max_tokens=args.answer_tokens, ignore_eos=True)
    prompt = filler(llm, args.user_tokens, 0)
    ttft, lengths, answers = [], [], []
    for turn in range(args.turns):
        request = llm.engine.add_request(prompt, params)
        llm.engine.run()
        stats = request.stats
        ttft.append(stats.first_token_time - stats.arrival_time)
        lengths.append(len(prompt))
        answers.append(list(request.output_ids))
        llm.engine.forget(request)
        prompt = prompt + list(request.output_ids) + filler(llm, args.user_tokens, turn + 1)
    return {"ttft_s": ttft, "prompt_tokens": lengths, "answers": answers,
            "last_turn_ttft_s": ttft[-1], "prefix_cache": llm.prefix_cache_stats}


def shared_prefix(llm: LLM, args: argparse.Namespace) -> dict[str, Any]:
    system = filler(llm, args.system_tokens, 1000)
    prompts = [system + filler(llm, 16, 2000 + i) for i in range(args.requests)]
    params = SamplingParams(max_tokens=args.max_tokens, ignore_eos=True)
    start = time.perf_counter()
    outputs = llm.generate(prompts, params)
    seconds = time.perf_counter() - start
    ttft = sorted(o.stats.first_token_time - o.stats.arrival_time for o in outputs)
    return {"seconds": seconds, "requests": len(prompts), "prompt_tokens": len(prompts[0]),
            "ttft_median_s": ttft[len(ttft) // 2],
            "tokens": [list(o.token_ids) for o in outputs],
            "prefix_cache": llm.prefix_cache_stats}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--model", default=None)
    parser.add_argument("--draft", default="default")
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--user-tokens", type=int, default=120)
    parser.add_argument("--answer-tokens", type=int, default=30)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--system-tokens", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-context", type=int, default=4096)
    parser.add_argument("--skip", choices=["conversation", "shared-prefix"], default=None)
    parser.add_argument("--out", default=None, help="write the JSON report here (else stdout)")
    args = parser.parse_args(argv)
    llm = LLM(model=args.model, draft=None if args.draft == "none" else args.draft,
              device=args.device, max_context=args.max_context, progress=False)
    llm.generate([filler(llm, 64, 99)], SamplingParams(max_tokens=4))  # warm-up
    report: dict[str, Any] = {
        "settings": {**vars(args), "backend": llm.backend.name,
                     "device_name": str(llm.backend.torch_device), "dtype": str(llm.dtype),
                     "torch": torch.__version__, "machine": platform.processor()
                     or platform.machine(), "threads": torch.get_num_threads()},
    }
    for name, run in (("conversation", conversation), ("shared_prefix", shared_prefix)):
        if args.skip and args.skip.replace("-", "_") == name:
            continue
        result = {}
        for label, enabled in (("off", False), ("on", True)):
            set_cache(llm, enabled)
            print(f"prefix_cache.py: {name}, cache {label}", file=sys.stderr, flush=True)
            result[label] = run(llm, args)
        key = "answers" if name == "conversation" else "tokens"
        on_tokens, off_tokens = result["on"].pop(key), result["off"].pop(key)
        result["same_tokens"] = on_tokens == off_tokens
        # in bf16 a cached prefix's K/V can round differently from one computed in a
        # longer prefill, so greedy answers may part: the share of requests that agree
        result["match_rate"] = sum(a == b for a, b in zip(on_tokens, off_tokens,
                                                          strict=True)) / len(on_tokens)
        if name == "conversation":
            off, on = result["off"]["last_turn_ttft_s"], result["on"]["last_turn_ttft_s"]
        else:
            off, on = result["off"]["seconds"], result["on"]["seconds"]
        result["speedup"] = off / on if on else None
        report[name] = result
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
