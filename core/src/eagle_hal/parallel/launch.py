"""Starting N tensor-parallel processes, one per device, and ``eagle-hal generate --tp N``.

``spawn_ranks`` starts the processes with ``torch.multiprocessing`` (spawn start method),
binds rank r to device ``base + r`` of the requested kind (every rank shares the host on
the CPU), selects the backend there, and joins the process group with the collective the
backend names (``Capabilities.distributed_backend``) through a rendezvous file in a fresh
temporary directory. Only rank 0 writes to stdout.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from eagle_hal.backend import Backend
from eagle_hal.errors import EagleHalError
from eagle_hal.parallel.context import ParallelContext

__all__ = ["RankFailed", "RankProgram", "device_for_rank", "launch_generate", "spawn_ranks"]

# A function every rank runs: ``program(context, backend, *args)``. It must be importable
# by name (defined at module level) so spawned processes can find it.
RankProgram = Callable[..., None]

_TIMEOUT = datetime.timedelta(minutes=10)


class RankFailed(EagleHalError, RuntimeError):
    """A tensor-parallel rank raised or died; the message carries the rank's traceback."""


def device_for_rank(device: str, rank: int) -> str:
    """The device string rank ``rank`` runs on: ``cpu`` for every rank on the host, else
    device ``index + rank`` of the requested kind (``cuda`` -> ``cuda:0``, ``cuda:1``...)."""
    from eagle_hal.device import parse_device

    spec = parse_device(device)
    if spec.is_auto:
        raise ValueError("tensor parallelism needs an explicit device kind (e.g. --device cuda)")
    if spec.torch_type == "cpu":
        return "cpu"
    return f"{spec.kind}:{(spec.index or 0) + rank}"


def spawn_ranks(
    program: RankProgram,
    world_size: int,
    args: tuple[Any, ...] = (),
    *,
    device: str = "cpu",
    backend: str | None = None,
) -> None:
    """Run ``program(context, backend, *args)`` in ``world_size`` new processes and wait.

    Raises ``RankFailed`` (with the failing rank's traceback) when a rank raises or dies;
    the other ranks are terminated."""
    import torch.multiprocessing as mp

    if world_size < 1:
        raise ValueError(f"tensor-parallel size must be >= 1, got {world_size}")
    with tempfile.TemporaryDirectory(prefix="eagle-hal-tp-") as rendezvous:
        init_method = (Path(rendezvous) / "rendezvous").as_uri()
        try:
            mp.spawn(
                _rank_main,
                args=(world_size, init_method, device, backend, program, args),
                nprocs=world_size,
                join=True,
            )
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            raise RankFailed(f"tensor-parallel rank {error.error_index} failed: {error}") from None


def _rank_main(
    rank: int,
    world_size: int,
    init_method: str,
    device: str,
    backend_name: str | None,
    program: RankProgram,
    args: tuple[Any, ...],
) -> None:
    import torch.distributed as dist

    from eagle_hal.registry import select_backend

    backend = select_backend(device_for_rank(device, rank), backend=backend_name)
    torch_device = backend.torch_device
    if torch_device.type == "cpu":  # the ranks share the host's cores: do not oversubscribe
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // world_size))
    else:
        torch.accelerator.set_device_index(torch_device.index or 0)
    collective = backend.capabilities.distributed_backend
    dist.init_process_group(
        backend=collective, init_method=init_method, rank=rank, world_size=world_size,
        timeout=_TIMEOUT, device_id=None if torch_device.type == "cpu" else torch_device,
    )
    context = ParallelContext(
        rank=rank, world_size=world_size, distributed_backend=collective,
        device=torch_device, group=dist.group.WORLD,
    )
    try:
        program(context, backend, *args)
        # every rank done with its collectives before any tears the group down: a rank
        # that leaves first can abort a peer still inside gloo ("terminate called without
        # an active exception", SIGABRT, seen once in a full CPU test run)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    # A rank that finished leaves without the interpreter's shutdown: C++ threads still
    # held by torch's collectives at exit abort the process ("terminate called without an
    # active exception", SIGABRT, after rank 0 had printed everything: seen in full CPU
    # test runs even after the barrier). Its output is flushed first; a rank that raised
    # does not get here, and spawn reports its traceback.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


# -- eagle-hal generate --tp N --------------------------------------------------------------


def launch_generate(args: argparse.Namespace, tp: int) -> int:
    """Run ``eagle-hal generate`` (its parsed ``args``) over ``tp`` tensor-parallel ranks;
    rank 0 prints exactly what the single-process command prints. Returns the exit code."""
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
    import time

    from eagle_hal.api import LLM, _resolve_dtype
    from eagle_hal.commands import generate as command
    from eagle_hal.engine.request import SamplingParams
    from eagle_hal.model.draft_vocab import restrict
    from eagle_hal.model.loading import default_draft_path, load_eagle_head
    from eagle_hal.parallel.sharding import load_sharded_target

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
    draft_path = default_draft_path(args.model) if draft_arg == "default" else draft_arg
    head = load_eagle_head(draft_path, target, dtype=dtype) if draft_path else None
    head = restrict(head, draft_path, args.draft_vocab, backend)
    llm = LLM.from_models(
        backend, target, head, tokenizer, command._spec(args, backend),
        max_batch_size=args.max_batch_size, max_context=args.max_context, seed=args.seed,
    )
    llm.draft_path = draft_path
    if verbose:
        print(
            f"loaded in {time.perf_counter() - started:.1f} s: backend {backend.name} on "
            f"{context.world_size} x {backend.torch_device.type} ({context.distributed_backend}), "
            f"{dtype}, draft head: {command.describe_draft(llm)}",
            file=sys.stderr, flush=True,
        )
    prompts = command._prompts(args)
    params = SamplingParams(
        temperature=args.temperature, top_p=args.top_p, top_k=args.top_k, seed=args.seed,
        max_new_tokens=args.max_new_tokens,
    )
    chat = not args.no_chat
    stream = not args.json and len(prompts) == 1
    run = command._timed_run(llm, prompts, params, chat, stream=stream)
    if args.json:
        import json

        report = command._report(llm, run, None)
        report["stats"]["tensor_parallel"] = context.world_size
        print(json.dumps(report, indent=2))
        return
    if not stream:
        for index, output in enumerate(run["outputs"]):
            print(f"--- [{index}] {output.prompt!r}")
            print(output.text)
    command._print_summary(llm, run, None)
