"""The parallel context: which rank this process is, of how many, and how ranks talk.

A ``ParallelContext`` is carried by a sharded model (``model.parallel``) and from there by
the ``ModelRunner`` and the ``EagleWorker``. Every collective eagle-hal issues goes through
it, and through ``torch.distributed`` with the collective the backend names
(``Capabilities.distributed_backend``: nccl, hccl, xccl, mccl; gloo on the CPU). With one
rank every collective is the identity and nothing is communicated.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from eagle_hal.errors import EagleHalError

__all__ = ["ParallelContext", "ShardingError", "parallel_of"]


class ShardingError(EagleHalError, ValueError):
    """A model cannot be split over the requested number of ranks as asked."""


@dataclasses.dataclass(frozen=True, slots=True)
class ParallelContext:
    """One rank's view of a tensor-parallel group.

    ``group`` is the ``torch.distributed`` process group (``None`` with one rank);
    ``device`` is where this rank's tensors and collective buffers live;
    ``distributed_backend`` is the collective library's name as torch.distributed knows it.
    """

    rank: int = 0
    world_size: int = 1
    distributed_backend: str = "none"
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))
    group: Any = dataclasses.field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside a world of {self.world_size}")
        if self.world_size > 1 and self.group is None:
            raise ValueError("a context of several ranks needs its process group")

    @classmethod
    def single(cls, device: torch.device | str = "cpu") -> ParallelContext:
        """The context of a process that holds the whole model."""
        return cls(device=torch.device(device))

    @property
    def is_parallel(self) -> bool:
        return self.world_size > 1

    @property
    def is_first_rank(self) -> bool:
        return self.rank == 0

    def local_size(self, total: int, what: str) -> int:
        """``total / world_size``; raises ``ShardingError`` (naming ``what``) unless exact."""
        if total % self.world_size:
            raise ShardingError(
                f"{what} ({total}) is not divisible by the tensor-parallel size "
                f"{self.world_size}; choose a --tp that divides it"
            )
        return total // self.world_size

    # -- collectives (identity with one rank) ----------------------------------------------

    def all_reduce(self, tensor: torch.Tensor) -> torch.Tensor:
        """Sum ``tensor`` over the ranks, in place; returns it. Every rank gets the same bits
        (the collective reduces each element once and distributes the result)."""
        if self.is_parallel:
            import torch.distributed as dist

            dist.all_reduce(tensor, group=self.group)
        return tensor

    def all_gather(self, tensor: torch.Tensor, dim: int = -1) -> torch.Tensor:
        """Concatenate every rank's ``tensor`` (same shape on all ranks) along ``dim``, in
        rank order: ``[..., n, ...]`` -> ``[..., world_size * n, ...]``."""
        if not self.is_parallel:
            return tensor
        import torch.distributed as dist

        tensor = tensor.contiguous()
        parts = [torch.empty_like(tensor) for _ in range(self.world_size)]
        dist.all_gather(parts, tensor, group=self.group)
        return torch.cat(parts, dim=dim)

    def broadcast_ints(self, values: list[int]) -> list[int]:
        """Rank 0's ``values`` on every rank (each rank passes a list of the same length)."""
        if not self.is_parallel:
            return list(values)
        import torch.distributed as dist

        buffer = torch.tensor(values, dtype=torch.int64, device=self.device)
        dist.broadcast(buffer, src=self._global_rank(0), group=self.group)
        return [int(v) for v in buffer.tolist()]

    def barrier(self) -> None:
        if self.is_parallel:
            import torch.distributed as dist

            dist.barrier(group=self.group)

    def _global_rank(self, group_rank: int) -> int:
        import torch.distributed as dist

        return dist.get_global_rank(self.group, group_rank)


def parallel_of(model: Any) -> ParallelContext:
    """The context a (sharded) model carries, or the single-process one."""
    context = getattr(model, "parallel", None)
    if isinstance(context, ParallelContext):
        return context
    return ParallelContext.single(getattr(model, "device", "cpu"))
