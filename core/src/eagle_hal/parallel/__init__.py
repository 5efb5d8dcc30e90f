"""Tensor parallelism through ``torch.distributed``, with the backend's own collective.

A target too large for one accelerator is split over N processes, one per device:

* ``ParallelContext`` (rank, world size, process group, the collective library's name)
  travels with the sharded model (``model.parallel``) into the ``ModelRunner`` and the
  ``EagleWorker``;
* ``sharded_llama`` / ``load_sharded_target`` / ``shard_llama`` split a Llama-family model
  (column-parallel Q/K/V and gate/up, row-parallel o and down, vocabulary-parallel
  embedding and ``lm_head``) and load only this rank's slice of each weight;
* ``eagle_hal.parallel.launch`` starts the N processes (``eagle-hal generate --tp N``).

The draft head is small and runs replicated: every rank drafts the same tree.

**The rule that keeps ranks in step — identical seeds.** Every rank must take the same
accept decision, or the ranks' KV caches and next forwards diverge (and collectives
deadlock). eagle-hal guarantees it by making every input of the decision identical rather
than by broadcasting the decision:

1. logits are identical on every rank: the last all-reduce and the ``lm_head`` all-gather
   hand every rank the same bits;
2. the sampling noise is counter-based (a pure function of seed, position and token), and
   the seed is the same on every rank: a request's own ``SamplingParams.seed``, or the
   worker's base seed mixed with the request id, where the base seed is **broadcast from
   rank 0** when the worker is built (request ids agree because every rank submits the
   same requests in the same order);
3. the one timing-driven choice, the adaptive controller's number of draft steps, is
   broadcast from rank 0 every iteration.

So greedy and sampled decoding agree token for token across ranks, with no per-iteration
communication beyond the model's own collectives (tests/core/parallel checks both).
"""

from __future__ import annotations

from eagle_hal.parallel.context import ParallelContext, ShardingError, parallel_of
from eagle_hal.parallel.layers import (
    ColumnParallelLinear,
    RowParallelLinear,
    ShardSpec,
    VocabParallelEmbedding,
    VocabParallelLMHead,
    sharded_parameters,
)
from eagle_hal.parallel.sharding import (
    load_sharded_target,
    load_sharded_weights,
    shard_llama,
    sharded_llama,
)

__all__ = [
    "ColumnParallelLinear",
    "ParallelContext",
    "RowParallelLinear",
    "ShardSpec",
    "ShardingError",
    "VocabParallelEmbedding",
    "VocabParallelLMHead",
    "load_sharded_target",
    "load_sharded_weights",
    "parallel_of",
    "shard_llama",
    "sharded_llama",
    "sharded_parameters",
]
