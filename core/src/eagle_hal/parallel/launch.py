"""Starting N tensor-parallel processes, one per device, each running one program.

``spawn_ranks`` starts the processes with ``torch.multiprocessing`` (spawn start method),
binds rank r to device ``base + r`` of the requested kind (every rank shares the host on
the CPU), selects the backend there, and joins the process group with the collective the
backend names (``Capabilities.distributed_backend``) through a rendezvous file in a fresh
temporary directory. Only rank 0 writes to stdout.
"""

from __future__ import annotations

import datetime
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from eagle_hal.errors import EagleHalError
from eagle_hal.parallel.context import ParallelContext

__all__ = ["RankFailed", "RankProgram", "device_for_rank", "spawn_ranks"]

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
