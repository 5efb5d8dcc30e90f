"""``eagle-hal generate``: generate text with EAGLE speculative decoding.

Text streams to the terminal by default (one prompt) or is printed per prompt (several);
``--json`` prints one object with the outputs and the run's statistics instead.
``--compare-plain`` also decodes the same prompts without the draft head, in the same
process, and prints both speeds side by side (what ``make demo`` shows).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from eagle_hal.validation import MAX_COUNT, arg_type, check_float, check_int, check_positive_int

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.backend import Backend
    from eagle_hal.parallel.context import ParallelContext

__all__ = ["add_arguments", "launch_generate", "run"]

# The flags' types: each a usage error (exit status 2) naming the flag for a value the
# Python API would refuse too (``eagle_hal.validation``), checked before anything loads.
POSITIVE = arg_type(check_positive_int)
SEED = arg_type(check_int, high=2**63 - 1)
TOP_K = arg_type(check_int, low=-1, meaning="0 or -1 disables it")
SPEC_STEPS = arg_type(check_int, meaning="0: no speculation")
TEMPERATURE = arg_type(check_float, float, low=0.0)
TOP_P = arg_type(check_float, float, low=0.0, high=1.0, low_open=True)


def draft_argument(text: str) -> str:
    """``--draft``'s value: an n-gram setting is checked while the command line is parsed
    (a head's path or id is checked when it loads)."""
    from eagle_hal.errors import InvalidArgument
    from eagle_hal.speculative.ngram import is_ngram, parse_ngram

    if is_ngram(text):
        try:
            parse_ngram("--draft", text)
        except InvalidArgument as bad:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected {bad.allowed}"
                                             ) from None
    return text


def draft_vocab_size(text: str) -> int | str:
    """``--draft-vocab``'s value, checked while the command line is parsed."""
    from eagle_hal.model.draft_vocab import parse_size

    try:
        return parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def add_arguments(parser: argparse.ArgumentParser) -> None:
    where = parser.add_argument_group("where")
    where.add_argument("--device", default="auto",
                       help='device string: "cpu", "cuda:0", "npu", "auto"')
    where.add_argument("--backend", default=None, help="force a backend by name")
    where.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    where.add_argument("--no-graphs", action="store_true",
                       help="run every forward eagerly (default: device graphs where the "
                            "backend has them)")
    where.add_argument("--no-prefix-caching", action="store_true",
                       help="compute every prompt from scratch (default: prompts that start "
                            "alike share the KV pages of the common prefix)")
    where.add_argument("--tp", type=POSITIVE, default=1,
                       help="tensor-parallel processes (one per device)")
    what = parser.add_argument_group("models")
    what.add_argument("--model", default=None,
                      help="HF directory, GGUF file or hub id org/name[@revision] "
                           "(default: SmolLM2-135M-Instruct)")
    what.add_argument("--draft", default="default", type=draft_argument,
                      help='EAGLE head directory or hub id, "default", "none", or '
                           '"ngram[:N,K]": no head, prompt lookup (matches of at most N '
                           'tokens, default 3; K continuations per node, default 1)')
    what.add_argument("--draft-vocab", default="auto", type=draft_vocab_size,
                      help='tokens the head drafts from: "auto" (the backend\'s choice: '
                      '"default" on the CPU, "full" elsewhere), "default" (its '
                      'draft_vocab.json\'s size), "full", or the N most frequent')
    prompts = parser.add_argument_group("prompts")
    prompts.add_argument("--prompt", action="append", default=[], help="a prompt (repeatable)")
    prompts.add_argument("--prompts-file", type=Path, default=None, help="one prompt per line")
    prompts.add_argument("--no-chat", action="store_true", help="do not apply the chat template")
    sampling = parser.add_argument_group("sampling")
    sampling.add_argument("--max-tokens", "--max-new-tokens", dest="max_tokens", type=POSITIVE,
                          default=128, help="output tokens at most (--max-new-tokens: the "
                          "same, its former name)")
    sampling.add_argument("--temperature", type=TEMPERATURE, default=0.0,
                          help="0: greedy (default)")
    sampling.add_argument("--top-p", type=TOP_P, default=1.0, help="in (0, 1]; 1: no cut")
    sampling.add_argument("--top-k", type=TOP_K, default=0, help="0 or -1: no cut (default 0)")
    sampling.add_argument("--seed", type=SEED, default=None)
    spec = parser.add_argument_group("speculation")
    spec.add_argument("--spec-steps", type=SPEC_STEPS, default=None,
                      help="draft steps S (0: no speculation; default: the backend's, 3 on the "
                           "CPU, else 5)")
    spec.add_argument("--spec-topk", type=POSITIVE, default=None,
                      help="branches per step K (1: chain)")
    spec.add_argument("--spec-draft-tokens", type=POSITIVE, default=None,
                      help="verify tokens N per request")
    spec.add_argument("--adaptive", action="store_true", help="let the controller choose S")
    out = parser.add_argument_group("output")
    out.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    out.add_argument("--compare-plain", action="store_true",
                     help="also run plain decoding of the same prompts and compare speeds")
    out.add_argument("--max-batch-size", type=POSITIVE, default=16)
    out.add_argument("--max-context", type=POSITIVE, default=2048)


def _prompts(args: argparse.Namespace) -> list[str]:
    """``--prompt``s, then ``--prompts-file``'s lines; the built-in prompt only when neither
    flag is given (a file that holds no prompt is an error, ``DatasetError``)."""
    from eagle_hal.commands.bench_prompts import load_prompts

    prompts = list(args.prompt)
    if args.prompts_file is not None:
        prompts += load_prompts(str(args.prompts_file), MAX_COUNT, flag="--prompts-file")
    if not prompts:
        prompts = ["Write a short poem about a lighthouse keeper."]
    return prompts


def _spec(args: argparse.Namespace, backend: Any) -> Any:
    """The command line's spec settings over ``backend``'s default spec of their kind: the
    adaptive mode's with ``--adaptive``, a tree's with ``--spec-topk`` above 1, else a
    chain's (``Backend.default_spec``)."""
    if args.adaptive:
        kind = "adaptive"
    else:
        kind = "tree" if args.spec_topk is not None and args.spec_topk > 1 else "chain"
    return backend.default_spec(kind).with_settings(
        args.spec_steps, args.spec_topk, args.spec_draft_tokens)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    if args.tp > 1:
        return launch_generate(args, args.tp)
    from eagle_hal.api import LLM
    from eagle_hal.engine.request import SamplingParams

    prompts = _prompts(args)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
        max_tokens=args.max_tokens,
    )
    draft = None if args.draft.lower() == "none" else args.draft
    started = time.perf_counter()
    from eagle_hal.registry import select_backend

    backend = select_backend(args.device, backend=args.backend)
    llm = LLM(
        model=args.model, draft=draft, device=args.device, backend=backend,
        spec=_spec(args, backend),
        dtype=args.dtype, max_batch_size=args.max_batch_size, max_context=args.max_context,
        seed=args.seed, progress=not args.json, graphs=not args.no_graphs and "auto",
        draft_vocab=args.draft_vocab, enable_prefix_caching=not args.no_prefix_caching,
    )
    if not args.json:
        head = describe_draft(llm)
        _progress(f"loaded in {time.perf_counter() - started:.1f} s: backend {llm.backend.name} on "
                  f"{llm.backend.torch_device}, {llm.dtype}, draft head: {head}")
    chat = not args.no_chat
    if args.compare_plain:  # a few tokens first, so neither timed run pays the warm-up
        llm.generate(prompts[:1], SamplingParams(max_tokens=4), chat=chat)
    stream = not args.json and len(prompts) == 1
    spec_run = _timed_run(llm, prompts, params, chat, stream=stream)
    plain_run = None
    if args.compare_plain:
        plain = LLM.from_models(
            llm.backend, llm.target, None, llm.tokenizer, llm.spec,
            max_batch_size=args.max_batch_size, max_context=args.max_context, seed=args.seed,
            enable_prefix_caching=not args.no_prefix_caching,
        )
        if llm.graphs:  # like for like: graphs on both sides or on neither
            plain.runner.enable_graphs()
        plain.generate(prompts[:1], SamplingParams(max_tokens=4), chat=chat)
        plain_run = _timed_run(plain, prompts, params, chat, stream=False)
    if args.json:
        print(json.dumps(_report(llm, spec_run, plain_run), indent=2))
        return 0
    if not stream:
        for index, output in enumerate(spec_run["outputs"]):
            print(f"--- [{index}] {output.prompt!r}")
            print(output.text)
    _print_summary(llm, spec_run, plain_run)
    return 0


def describe_draft(llm: Any) -> str:
    """The draft head and the vocabulary it drafts from, for a status line."""
    drafter = getattr(llm, "drafter", None)
    if drafter is not None:
        return f"none, n-gram prompt lookup (N = {drafter.max_ngram}, K = {drafter.topk})"
    if llm.draft is None:
        return "none (plain decoding)"
    size, vocab = llm.draft_vocab_size, llm.target.config.vocab_size
    tokens = ("the whole vocabulary" if size == vocab
              else f"the {size:,} most frequent of {vocab:,} tokens")
    return f"{llm.draft_path} (drafting from {tokens})"


def _timed_run(
    llm: Any, prompts: list[str], params: Any, chat: bool, *, stream: bool
) -> dict[str, Any]:
    start = time.perf_counter()
    if stream:
        for delta in llm.stream(prompts, params, chat=chat):
            print(delta.text, end="", flush=True)
        print()
        outputs = llm.last_outputs
    else:
        outputs = llm.generate(prompts, params, chat=chat)
    elapsed = time.perf_counter() - start
    tokens = sum(o.num_tokens for o in outputs)
    verify_steps = sum(o.stats.verify_steps for o in outputs)
    accepted = sum(o.stats.accepted_tokens for o in outputs)
    return {
        "outputs": outputs,
        "seconds": elapsed,
        "tokens": tokens,
        "tokens_per_s": tokens / elapsed if elapsed > 0 else 0.0,
        "verify_steps": verify_steps,
        "accept_length": accepted / verify_steps if verify_steps else 0.0,
    }


def _stats(llm: Any, run: dict[str, Any]) -> dict[str, Any]:
    return {
        "tokens_per_s": round(run["tokens_per_s"], 2),
        "accept_length": round(run["accept_length"], 3),
        "verify_steps": run["verify_steps"],
        "tokens": run["tokens"],
        "seconds": round(run["seconds"], 3),
        "backend": llm.backend.name,
        "device": str(llm.backend.torch_device),
    }


def _report(llm: Any, spec_run: dict[str, Any], plain_run: dict[str, Any] | None) -> dict[str, Any]:
    report: dict[str, Any] = {
        "outputs": [
            {"text": o.text, "token_ids": list(o.token_ids), "num_tokens": o.num_tokens,
             "accept_length": round(o.accept_length, 3), "finish_reason": o.finish_reason.value}
            for o in spec_run["outputs"]
        ],
        "stats": _stats(llm, spec_run),
    }
    report["stats"]["draft"] = str(llm.draft_path) if llm.draft is not None else None
    drafter = getattr(llm, "drafter", None)
    if drafter is not None:
        report["stats"]["draft"] = f"ngram:{drafter.max_ngram},{drafter.topk}"
    report["stats"]["draft_vocab_size"] = llm.draft_vocab_size
    # lookups, tokens looked up, cached tokens (the prefill skipped them), hit rate; None off
    report["stats"]["prefix_cache"] = llm.prefix_cache_stats
    if plain_run is not None:
        report["plain"] = _stats(llm, plain_run)
        report["plain"]["same_tokens"] = [
            a.token_ids == b.token_ids
            for a, b in zip(spec_run["outputs"], plain_run["outputs"], strict=True)
        ]
    return report


def _print_summary(llm: Any, spec_run: dict[str, Any], plain_run: dict[str, Any] | None) -> None:
    label = "EAGLE" if llm.draft is not None else "plain"
    if getattr(llm, "drafter", None) is not None:
        label = "n-gram"
    print(f"\n{label}: {spec_run['tokens']} tokens in {spec_run['seconds']:.2f} s = "
          f"{spec_run['tokens_per_s']:.1f} tokens/s, accept length {spec_run['accept_length']:.2f} "
          f"({spec_run['verify_steps']} target passes) on "
          f"{llm.backend.name}:{llm.backend.torch_device}")
    if plain_run is not None:
        same = all(a.token_ids == b.token_ids
                   for a, b in zip(spec_run["outputs"], plain_run["outputs"], strict=True))
        ratio = (spec_run["tokens_per_s"] / plain_run["tokens_per_s"]
                 if plain_run["tokens_per_s"] else 0.0)
        print(f"plain: {plain_run['tokens']} tokens in {plain_run['seconds']:.2f} s = "
              f"{plain_run['tokens_per_s']:.1f} tokens/s, "
              f"accept length {plain_run['accept_length']:.2f}")
        print(f"speedup {ratio:.2f}x; same tokens as plain decoding: {'yes' if same else 'NO'}")


def launch_generate(args: argparse.Namespace, tp: int) -> int:
    """Run ``eagle-hal generate`` (its parsed ``args``) over ``tp`` tensor-parallel ranks;
    rank 0 prints exactly what the single-process command prints. Returns the exit code."""
    from eagle_hal.parallel.launch import spawn_ranks
    from eagle_hal.parallel.sharding import check_shardable, model_config_at

    device = args.device
    if device == "auto":  # the registry's choice for this host, one device per rank from it
        from eagle_hal.registry import select_backend

        device = str(select_backend("auto", backend=args.backend).device_spec)
    # refuse a model that does not split before starting any process
    check_shardable(model_config_at(args.model), tp)
    spawn_ranks(_generate_rank, tp, (args,), device=device, backend=args.backend)
    return 0


def _generate_rank(context: ParallelContext, backend: Backend, args: argparse.Namespace) -> None:
    from eagle_hal.api import LLM, _resolve_dtype
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.model.draft_vocab import restrict
    from eagle_hal.model.hub import resolve_draft
    from eagle_hal.model.loading import default_draft_path, load_eagle_head
    from eagle_hal.parallel.sharding import load_sharded_target
    from eagle_hal.speculative.ngram import NgramDrafter, is_ngram, parse_ngram

    if not context.is_first_rank:  # the ranks run the same program; one of them talks
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - lives as long as the process
    started = time.perf_counter()
    dtype = _resolve_dtype(args.dtype, backend)
    verbose = context.is_first_rank and not args.json
    if verbose and args.compare_plain:
        print("--compare-plain is not supported with --tp; run plain decoding with --draft none",
              file=sys.stderr)
    target, tokenizer = load_sharded_target(
        args.model, context, dtype=dtype, device=backend.torch_device, progress=verbose
    )
    draft_arg = None if args.draft.lower() == "none" else args.draft
    drafter = None
    if is_ngram(draft_arg):  # no head: every rank proposes from the same tokens
        drafter, draft_arg = NgramDrafter(*parse_ngram("--draft", args.draft)), None
    draft_path = default_draft_path(args.model) if draft_arg == "default" else draft_arg
    if draft_path and draft_arg != "default":
        # a hub id becomes its snapshot directory, where restrict() finds draft_vocab.json
        draft_path = resolve_draft(draft_path)
    head = load_eagle_head(draft_path, target, dtype=dtype) if draft_path else None
    head = restrict(head, draft_path, args.draft_vocab, backend)
    spec = _spec(args, backend)
    if drafter is not None and spec.topk != drafter.topk:
        spec = spec.with_settings(topk=drafter.topk)
    llm = LLM.from_models(
        backend, target, head, tokenizer, spec, drafter=drafter,
        max_batch_size=args.max_batch_size, max_context=args.max_context, seed=args.seed,
        enable_prefix_caching=not args.no_prefix_caching,
    )
    llm.draft_path = draft_path
    if verbose:
        print(
            f"loaded in {time.perf_counter() - started:.1f} s: backend {backend.name} on "
            f"{context.world_size} x {backend.torch_device.type} ({context.distributed_backend}), "
            f"{dtype}, draft head: {describe_draft(llm)}",
            file=sys.stderr, flush=True,
        )
    prompts = _prompts(args)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
        max_tokens=args.max_tokens,
    )
    chat = not args.no_chat
    stream = not args.json and len(prompts) == 1
    run = _timed_run(llm, prompts, params, chat, stream=stream)
    if args.json:
        report = _report(llm, run, None)
        report["stats"]["tensor_parallel"] = context.world_size
        print(json.dumps(report, indent=2))
        return
    if not stream:
        for index, output in enumerate(run["outputs"]):
            print(f"--- [{index}] {output.prompt!r}")
            print(output.text)
    _print_summary(llm, run, None)
