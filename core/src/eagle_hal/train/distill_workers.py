"""Self-distillation in several processes that share one device.

Generation at a large batch is bound by the host: each decode step does a few microseconds
of Python work per request (scheduling, pages, appending tokens), while a small target's
forward over the whole batch keeps the device busy for less than that
(``benchmarks/bench_engine_host.py``). One process drives the device from one core; ``n``
processes on the same device, each with its own engine, keep it busier.

The prompts are dealt by index: process ``i`` of ``n`` writes and answers prompts ``i, i +
n, i + 2n, …`` (``selfdistill.generate_shard``). A prompt's opener, temperatures and sampling
seeds follow from its index alone, so the shards together generate what one process would;
only the batches' compositions differ, and with them, on some devices, the last bits of a
forward. A prompt that two processes happen to write alike is kept once, at its lowest
index (``selfdistill.build_dataset``).

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
    The progress bar is this process's shard; each shard's time report follows it. Raises
    what a worker raised, and ``RuntimeError`` as ``generate_dataset``."""
    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    deadline = None if config.time_budget_s is None else time.time() + config.time_budget_s
    shards: list[Shard] = []
    threads = torch.get_num_threads()
    # on the CPU the processes are the device: they share its cores, not oversubscribe them
    share = max(1, threads // workers) if backend.torch_device.type == "cpu" else threads
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(max(workers - 1, 1), mp_context=context) as pool:
        futures = [pool.submit(_worker, source, config, (i, workers), deadline, share)
                   for i in range(1, workers)]
        torch.set_num_threads(share)
        try:
            shards.append(generate_shard(backend, target, tokenizer, config,
                                         shard=(0, workers), progress=progress))
            shards += [future.result() for future in futures]
        except BaseException:
            for future in futures:
                future.cancel()
            raise
        finally:
            torch.set_num_threads(threads)
    if progress:
        for i, shard in enumerate(shards):
            print(f"shard {i + 1} of {workers}: {len(shard.kept)} sequences; {shard.report}",
                  file=sys.stderr)
    return build_dataset(shards, config, target_name=target_name, target_sha256=target_sha256,
                         command=command)


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
    if deadline is not None:
        config = dataclasses.replace(config, time_budget_s=max(0.0, deadline - time.time()))
    return generate_shard(backend, target, tokenizer, config, shard=shard, progress=False)
