"""Self-distillation in several processes that share one device.

Generation at a large batch is bound by the host: each decode step does a few microseconds
of Python work per request (scheduling, pages, appending tokens), while a small target's
forward over the whole batch keeps the device busy for less than that
(``benchmarks/bench_engine_host.py``). One process drives the device from one core; ``n``
processes on the same device, each with its own engine, keep it busier.

The prompts are dealt by index: process ``i`` of ``n`` writes and answers prompts ``i, i +
n, i + 2n, …`` (``selfdistill.generate_shard``). A prompt's opener, temperatures and sampling
seeds follow from its index alone, so the shards write and answer the prompts one process
would; only the batches' compositions differ, and with them, on some devices, the last
bits of a forward. A prompt written twice is kept once: at its lowest index when the
copies fall in different shards (``selfdistill.build_dataset``), the first one written
when in the same shard, so which copy of a duplicate survives (and with it its index's
answer temperature and held-out flag) may differ from one process's choice.

This process runs shard 0 on the target it has loaded; the others are spawned (never
forked: the device runtime is already initialised here), load the same target from the
same file on the same device, and start generating when loaded. A time budget is one
deadline for all of them.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import multiprocessing
import sys
import time
from pathlib import Path

import torch

from eagle_hal.backend import Backend
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DistillDataset
from eagle_hal.train.selfdistill import (
    ChatTokenizer,
    DistillConfig,
    Shard,
    build_dataset,
    generate_shard,
)

__all__ = ["TargetSource", "generate_dataset_in_workers"]


@dataclasses.dataclass(frozen=True, slots=True)
class TargetSource:
    """What a worker process needs to load the target this process runs."""

    model_path: str
    device: str  # the concrete device, e.g. "cuda:0" (not "auto")
    backend: str  # the backend's name, so that every process selects the same one
    dtype: str  # "float32", "bfloat16", "float16"

    @classmethod
    def of(cls, model_path: str | Path, backend: Backend, dtype: torch.dtype) -> TargetSource:
        return cls(str(model_path), str(backend.torch_device), backend.name,
                   str(dtype).removeprefix("torch."))


def generate_dataset_in_workers(
    backend: Backend,
    target: LlamaForCausalLM,
    tokenizer: ChatTokenizer,
    config: DistillConfig,
    source: TargetSource,
    workers: int,
    *,
    target_name: str = "",
    target_sha256: str = "",
    command: str = "",
    progress: bool = True,
) -> DistillDataset:
    """``selfdistill.generate_dataset`` in ``workers`` processes on ``backend``'s device
    (this one, with ``target`` loaded from ``source``, and ``workers - 1`` spawned ones).
    The progress bar is this process's shard; each shard's time report follows it. A
    spawned shard that fails is reported and left out (the rest stays a valid data set);
    this process's failing stops the others and raises. ``RuntimeError`` as
    ``generate_dataset``."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    started = time.time()
    deadline = None if config.time_budget_s is None else started + config.time_budget_s
    threads = torch.get_num_threads()
    # on the CPU the processes are the device: they share its cores, not oversubscribe them
    share = max(1, threads // workers) if backend.torch_device.type == "cpu" else threads
    pool = concurrent.futures.ProcessPoolExecutor(
        max(workers - 1, 1), mp_context=multiprocessing.get_context("spawn"))
    futures = [pool.submit(_worker, source, config, (i, workers), deadline, share)
               for i in range(1, workers)]
    torch.set_num_threads(share)
    try:
        shards = [generate_shard(backend, target, tokenizer, config, shard=(0, workers),
                                 deadline=deadline, progress=progress)]
    except BaseException:
        # the others would run to their deadline (or through every prompt): stop them
        processes = list(getattr(pool, "_processes", {}).values())  # no public handle
        pool.shutdown(wait=False, cancel_futures=True)
        for process in processes:
            process.terminate()
        raise
    finally:
        torch.set_num_threads(threads)
    for i, future in enumerate(futures, start=2):
        try:
            shards.append(future.result())
        except Exception as error:  # noqa: BLE001 - the other shards' data stays usable
            print(f"warning: shard {i} of {workers} failed ({type(error).__name__}: {error}); "
                  "its prompts are missing from the data set", file=sys.stderr)
    pool.shutdown()
    if progress:
        for i, shard in enumerate(shards, start=1):
            print(f"shard {i}: {len(shard.kept)} sequences; {shard.report}", file=sys.stderr)
    return build_dataset(shards, config, target_name=target_name, target_sha256=target_sha256,
                         command=command, seconds=time.time() - started)


def _worker(source: TargetSource, config: DistillConfig, shard: tuple[int, int],
            deadline: float | None, threads: int) -> Shard:
    """One spawned process's shard: load the target as ``source`` says, then generate with
    ``threads`` intra-op threads until ``deadline`` (``time.time()``), if any."""
    from eagle_hal.model.loading import load_target
    from eagle_hal.registry import select_backend

    torch.set_num_threads(threads)

    backend = select_backend(source.device, backend=source.backend)
    target, tokenizer = load_target(Path(source.model_path), dtype=getattr(torch, source.dtype),
                                    device=backend.torch_device, progress=False)
    return generate_shard(backend, target, tokenizer, config, shard=shard, deadline=deadline,
                          progress=False)
