"""``eagle-hal serve``: an OpenAI-compatible HTTP server (``eagle_hal.serve``).

Every flag is checked before anything loads: a bad value, an unreadable key file, or a
non-loopback ``--host`` without a key (and without ``--allow-unauthenticated``) is a usage
error (exit status 2). The key comes from ``EAGLE_HAL_API_KEY`` or ``--api-key-file``,
never from the command line. See docs/serving.md.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from eagle_hal.commands.generate import POSITIVE, SEED, SPEC_STEPS, draft_vocab_size
from eagle_hal.errors import InvalidArgument
from eagle_hal.validation import arg_type, check_float, check_int

__all__ = ["add_arguments", "run", "served_name"]

PORT = arg_type(check_int, high=65535)
COUNT = arg_type(check_int)
SECONDS = arg_type(check_float, float, low=0.0)
DEFAULT_MODEL_NAME = "SmolLM2-135M-Instruct"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from eagle_hal.serve.limits import RequestLimits

    where = parser.add_argument_group("where")
    where.add_argument("--device", default="auto",
                       help='device string: "cpu", "cuda:0", "npu", "auto"')
    where.add_argument("--backend", default=None, help="force a backend by name")
    where.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    where.add_argument("--no-graphs", action="store_true",
                       help="run every forward eagerly (default: device graphs where the "
                            "backend has them)")
    models = parser.add_argument_group("models")
    models.add_argument("--model", default=None,
                        help="HF directory or GGUF file (default: SmolLM2-135M-Instruct)")
    models.add_argument("--draft", default="default",
                        help='EAGLE head directory, "default" or "none"')
    models.add_argument("--draft-vocab", default="auto", type=draft_vocab_size,
                        help='tokens the head drafts from: "auto", "default", "full" or N')
    models.add_argument("--served-model-name", action="append", default=None,
                        help="the name clients give as model (repeatable; default: the "
                             "model file's or directory's name)")
    spec = parser.add_argument_group("speculation")
    spec.add_argument("--spec-steps", type=SPEC_STEPS, default=None,
                      help="draft steps S (0: no speculation; default: the backend's)")
    spec.add_argument("--spec-topk", type=POSITIVE, default=None, help="branches per step K")
    spec.add_argument("--spec-draft-tokens", type=POSITIVE, default=None,
                      help="verify tokens N per request")
    spec.add_argument("--adaptive", action="store_true", help="let the controller choose S")
    engine = parser.add_argument_group("engine")
    engine.add_argument("--max-batch-size", type=POSITIVE, default=16,
                        help="requests decoded together")
    engine.add_argument("--max-context", type=POSITIVE, default=2048,
                        help="tokens a request may hold, prompt and output")
    engine.add_argument("--kv-cache-tokens", type=POSITIVE, default=None,
                        help="the KV cache's size in tokens (default: from the batch and "
                             "context)")
    engine.add_argument("--seed", type=SEED, default=None,
                        help="the engine's seed for requests that give none")
    engine.add_argument("--max-waiting", type=COUNT, default=256,
                        help="requests that may wait beyond the batch; past them, 429")
    engine.add_argument("--no-prefix-caching", action="store_true",
                        help="compute every prompt from scratch (default: requests of one "
                             "API key that start alike share the KV pages of the common "
                             "prefix)")
    http = parser.add_argument_group("http")
    http.add_argument("--host", default="127.0.0.1",
                      help="address to bind (default: loopback only)")
    http.add_argument("--port", type=PORT, default=8000, help="0: any free port")
    http.add_argument("--api-key-file", type=Path, default=None,
                      help="a file whose first line is the API key (else EAGLE_HAL_API_KEY)")
    http.add_argument("--allow-unauthenticated", action="store_true",
                      help="serve a non-loopback --host without an API key")
    http.add_argument("--public-metrics", action="store_true",
                      help="serve /metrics without the API key")
    http.add_argument("--shutdown-timeout", type=SECONDS, default=30.0,
                      help="seconds running requests may finish after SIGTERM")
    http.add_argument("--log-level", default="info",
                      choices=["critical", "error", "warning", "info", "debug"])
    caps = parser.add_argument_group("per-request caps (checked before admission)")
    defaults = RequestLimits()
    for name, help_text in (
        ("body_bytes", "request body size; past it, 413"),
        ("n", "choices a request (n times its prompts)"),
        ("max_tokens", "max_tokens a choice may ask (the context bounds it too)"),
        ("stop", "stop strings a request"),
        ("stop_chars", "characters of each stop string"),
        ("logit_bias", "logit_bias entries"),
        ("top_logprobs", "top_logprobs (logprobs of a completion)"),
        ("prompts", "prompts of one completion request"),
    ):
        field = f"max_{name}" if not name.startswith("max_") else name
        caps.add_argument(f"--limit-{name.replace('_', '-')}", type=POSITIVE,
                          default=getattr(defaults, field), dest=f"limit_{field}",
                          help=f"{help_text} (default: {getattr(defaults, field)})")


def served_name(model: str | None) -> str:
    """The name a model is served under by default: its file's or directory's name."""
    if model is None:
        return DEFAULT_MODEL_NAME
    name = Path(model).name or str(model)
    return name[: -len(".gguf")] if name.lower().endswith(".gguf") else name


def _config(args: argparse.Namespace) -> Any:
    """The ``ServeConfig`` of the flags; ``InvalidArgument`` for what may not be served."""
    from eagle_hal.serve.auth import is_loopback, load_api_key
    from eagle_hal.serve.config import ServeConfig
    from eagle_hal.serve.limits import RequestLimits

    key = load_api_key(args.api_key_file)
    if key is None and not is_loopback(args.host) and not args.allow_unauthenticated:
        raise InvalidArgument("--host", args.host, "a loopback address (127.0.0.1, ::1, "
                              "localhost) unless an API key is set (EAGLE_HAL_API_KEY or "
                              "--api-key-file) or --allow-unauthenticated is given")
    limits = RequestLimits(**{name[len("limit_"):]: value for name, value in vars(args).items()
                              if name.startswith("limit_")})
    return ServeConfig(
        model_names=tuple(args.served_model_name or [served_name(args.model)]),
        api_key=key, public_metrics=args.public_metrics, limits=limits,
        max_waiting=args.max_waiting, shutdown_grace_s=args.shutdown_timeout,
    )


def _spec(args: argparse.Namespace, backend: Any) -> Any:
    if args.adaptive:
        kind = "adaptive"
    else:
        kind = "tree" if args.spec_topk is not None and args.spec_topk > 1 else "chain"
    return backend.default_spec(kind).with_settings(
        args.spec_steps, args.spec_topk, args.spec_draft_tokens)


def run(args: argparse.Namespace) -> int:
    try:
        import fastapi  # noqa: F401
        import prometheus_client  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as missing:
        print(f"eagle-hal serve: error: {missing.name} is not installed; "
              'pip install "eagle-hal[serve]"', file=sys.stderr)
        return 1
    config = _config(args)  # every refusal before anything loads
    from eagle_hal.api import LLM
    from eagle_hal.commands.generate import describe_draft
    from eagle_hal.registry import select_backend
    from eagle_hal.serve.app import create_app
    from eagle_hal.serve.server import Server

    started = time.perf_counter()
    backend = select_backend(args.device, backend=args.backend)
    llm = LLM(
        model=args.model, draft=None if args.draft.lower() == "none" else args.draft,
        device=args.device, backend=backend, spec=_spec(args, backend), dtype=args.dtype,
        max_batch_size=args.max_batch_size, max_context=args.max_context,
        kv_cache_tokens=args.kv_cache_tokens, seed=args.seed,
        graphs=not args.no_graphs and "auto", draft_vocab=args.draft_vocab,
        enable_prefix_caching=not args.no_prefix_caching,
    )
    server = Server(create_app(llm, config), host=args.host, port=args.port,
                    log_level=args.log_level, access_log=args.log_level in ("info", "debug"))
    auth = "an API key" if config.api_key else "no API key"
    print(f"loaded in {time.perf_counter() - started:.1f} s: backend {llm.backend.name} on "
          f"{llm.backend.torch_device}, {llm.dtype}, draft head: {describe_draft(llm)}\n"
          f"serving {', '.join(config.model_names)} at {server.url}/v1 with {auth}",
          file=sys.stderr, flush=True)
    server.run()
    return 0
