"""Sharded linear and embedding layers, and how each takes its slice of a checkpoint tensor.

Megatron's split of a transformer block needs two collectives per block and nothing else:

* ``ColumnParallelLinear`` holds a slice of the output features (Q/K/V by heads, gate/up by
  intermediate channels); its output stays sharded, no communication;
* ``RowParallelLinear`` holds the matching slice of the input features (o, down); each rank
  computes a partial sum and one all-reduce completes it (the bias is added once, after);
* ``VocabParallelEmbedding`` holds a contiguous range of vocabulary rows; a token outside
  the range embeds to zero and an all-reduce fills it in (exact: one rank contributes);
* ``VocabParallelLMHead`` computes the logits of its vocabulary range; an all-gather
  assembles ``[n, vocab]``.

Vocabulary ranges are padded to equal size (``ceil(vocab / world_size)`` rows per rank, the
padding rows zero and sliced off the gathered logits), so any vocabulary size shards.
"""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from eagle_hal.parallel.context import ParallelContext

__all__ = [
    "ColumnParallelLinear",
    "RowParallelLinear",
    "ShardSpec",
    "VocabParallelEmbedding",
    "VocabParallelLMHead",
    "sharded_parameters",
]


@dataclasses.dataclass(frozen=True, slots=True)
class ShardSpec:
    """This rank's slice of a checkpoint tensor: rows/columns ``[start, stop)`` of ``dim``,
    zero-padded to ``shard_size`` along ``dim``."""

    dim: int
    full_size: int
    shard_size: int
    rank: int

    def __post_init__(self) -> None:
        if self.shard_size < 1 or self.full_size < 1:
            raise ValueError("shard and full sizes must be >= 1")

    @classmethod
    def split(
        cls, dim: int, full_size: int, context: ParallelContext, *, pad: bool = False
    ) -> ShardSpec:
        """Equal contiguous shards of ``full_size`` (rounded up with zero padding if ``pad``;
        otherwise ``full_size`` must divide, else ``ShardingError``)."""
        world = context.world_size
        if pad:
            shard = -(-full_size // world)
        else:
            shard = context.local_size(full_size, f"dimension {dim} of a sharded weight")
        return cls(dim, full_size, shard, context.rank)

    @property
    def start(self) -> int:
        return min(self.rank * self.shard_size, self.full_size)

    @property
    def stop(self) -> int:
        return min(self.start + self.shard_size, self.full_size)

    def take(self, full: torch.Tensor) -> torch.Tensor:
        """This rank's slice of ``full`` (the whole checkpoint tensor), padded."""
        return self.pad(full.narrow(self.dim, self.start, self.stop - self.start))

    def index(self, ndim: int) -> tuple[slice, ...]:
        """An index selecting the unpadded slice (for lazy readers such as safetensors')."""
        return tuple(
            slice(self.start, self.stop) if d == self.dim else slice(None) for d in range(ndim)
        )

    def pad(self, piece: torch.Tensor) -> torch.Tensor:
        missing = self.shard_size - piece.shape[self.dim]
        if missing == 0:
            return piece
        shape = list(piece.shape)
        shape[self.dim] = missing
        return torch.cat([piece, piece.new_zeros(shape)], dim=self.dim)


class ColumnParallelLinear(nn.Linear):
    """``y[:, shard] = x @ W[shard].T (+ b[shard])``: output features split over ranks.

    ``x`` ``[T, in]`` (replicated) -> ``[T, out / world_size]`` (this rank's features)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool, context: ParallelContext
    ) -> None:
        self.spec = ShardSpec.split(0, out_features, context)
        super().__init__(in_features, self.spec.shard_size, bias=bias)

    def shard_specs(self) -> dict[str, ShardSpec]:
        specs = {"weight": self.spec}
        if self.bias is not None:
            specs["bias"] = self.spec
        return specs


class RowParallelLinear(nn.Linear):
    """``y = all_reduce(x[:, shard] @ W[:, shard].T) + b``: input features split over ranks.

    ``x`` ``[T, in / world_size]`` (this rank's features) -> ``[T, out]`` (replicated)."""

    def __init__(
        self, in_features: int, out_features: int, bias: bool, context: ParallelContext
    ) -> None:
        self.spec = ShardSpec.split(1, in_features, context)
        super().__init__(self.spec.shard_size, out_features, bias=bias)
        self.context = context

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        partial = F.linear(x, self.weight)  # [T, out], this rank's share of the sum
        total = self.context.all_reduce(partial)
        return total if self.bias is None else total + self.bias

    def shard_specs(self) -> dict[str, ShardSpec]:
        return {"weight": self.spec}  # the bias is replicated and added once


class VocabParallelEmbedding(nn.Module):
    """Token embeddings with the vocabulary split into contiguous per-rank ranges.

    ``input_ids`` ``[T]`` -> ``[T, hidden]`` (replicated; one all-reduce)."""

    def __init__(self, vocab_size: int, hidden_size: int, context: ParallelContext) -> None:
        super().__init__()
        self.spec = ShardSpec.split(0, vocab_size, context, pad=True)
        self.weight = nn.Parameter(torch.empty(self.spec.shard_size, hidden_size))
        self.context = context

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        local = input_ids - self.spec.start  # [T]
        mine = (input_ids >= self.spec.start) & (input_ids < self.spec.stop)  # [T]
        embeds = F.embedding(torch.where(mine, local, 0), self.weight)  # [T, hidden]
        embeds = embeds * mine[:, None].to(embeds.dtype)
        return self.context.all_reduce(embeds)

    def shard_specs(self) -> dict[str, ShardSpec]:
        return {"weight": self.spec}


class VocabParallelLMHead(nn.Module):
    """Logits over this rank's vocabulary range, all-gathered into the full vocabulary.

    ``hidden`` ``[n, hidden]`` -> ``[n, vocab]`` (replicated). Shares ``weight`` with a
    ``VocabParallelEmbedding`` when the model ties them (same ranges, same padding)."""

    def __init__(self, hidden_size: int, vocab_size: int, context: ParallelContext) -> None:
        super().__init__()
        self.spec = ShardSpec.split(0, vocab_size, context, pad=True)
        self.weight = nn.Parameter(torch.empty(self.spec.shard_size, hidden_size))
        self.vocab_size = vocab_size
        self.context = context

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        local = F.linear(hidden, self.weight)  # [n, vocab_shard]
        return self.context.all_gather(local, dim=-1)[..., : self.vocab_size]  # [n, vocab]

    def rows(self, token_ids: torch.Tensor) -> torch.Tensor:
        """The full-width weight rows of ``token_ids`` ``[n]`` -> ``[n, hidden]`` on every
        rank (a draft vocabulary's lm_head; an all-gather of the shards, once)."""
        full = self.context.all_gather(self.weight.detach(), dim=0)[: self.vocab_size]
        return full[token_ids.to(full.device)]

    def shard_specs(self) -> dict[str, ShardSpec]:
        return {"weight": self.spec}


_SHARDED = (ColumnParallelLinear, RowParallelLinear, VocabParallelEmbedding, VocabParallelLMHead)


def sharded_parameters(model: nn.Module) -> dict[str, ShardSpec]:
    """Every sharded parameter of ``model`` by its full (checkpoint) name, with its slice.
    Parameters not listed are replicated: each rank loads the whole tensor."""
    specs: dict[str, ShardSpec] = {}
    for prefix, module in model.named_modules():
        if isinstance(module, _SHARDED):
            for name, spec in module.shard_specs().items():
                specs[f"{prefix}.{name}" if prefix else name] = spec
    return specs
