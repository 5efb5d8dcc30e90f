"""Device-graph capture of model forwards, per batch-size bucket.

``GraphRunner`` sits beside the ``ModelRunner`` and replaces an eager forward by the replay
of a captured one when it can. A forward is capturable when every request has the same
number of query tokens (DECODE, TARGET_VERIFY, DRAFT_DECODE, and DRAFT_EXTEND when the
accepted lengths agree, e.g. always at batch size 1) and the batch fits a bucket. Graphs are
captured lazily, the first time a shape is seen, one per

    (model, mode, bucket, tokens per request, draft depth, aux layers),

each with its own static input buffers (the padded ``ForwardBatch`` it was captured with)
and static outputs; all graphs share the ``GraphCapture``'s memory pool.

Replay copies the real batch into the front of the static buffers, padded requests reading
and disturbing nothing real, then the attention backend's replay hooks run and the
outputs are sliced to the real tokens (``engine.forward_graph``, which holds one captured
forward).

An extend whose lengths vary from call to call (prompts' prefills, the draft's extend
over them, draft catch-ups) would want a graph per shape. It replays instead from a graph
per *token bucket*: its tokens fill the front of the bucket's static run and the padding
tokens after them write their K/V to the padding slot; the outputs are sliced to the real
tokens. Where the attention backend declares ``ragged_extend_graphs`` (``RAGGED_BUCKETS``,
16 to 4,096 tokens), one graph serves any number of requests up to the largest batch
bucket: the padding tokens are a request of their own (table row 0, prefix 0), and the
backend rebuilds what it derives from the lengths on replay. Elsewhere only one-request
extends replay (``PREFILL_BUCKETS``, 16 to 512 tokens), the padding in the request's own
causal run, never past the end of its table row. Eagerly such a forward costs the host one
launch per op (``benchmarks/profile_prefill.py --device cuda`` on an H200: an 83-token
prefill takes 15 ms of host time for 0.9 ms of device work, with the draft's extend 28 ms;
16 prompts at once 15.4 ms against 6.7 ms replayed). ``GraphRunner(prefill_graphs=False)``
turns this off. Anything else (a tree, more requests than the largest bucket, more tokens
than the largest token bucket) returns ``None`` and the caller runs eagerly.

The draft's chain and tree loops are captured whole, one graph per loop shape
(``engine.graph_draft_loop``).
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from eagle_hal.backend import TreeMaskMode
from eagle_hal.engine import graph_draft_loop
from eagle_hal.engine.chain_graph import ChainGraph
from eagle_hal.engine.forward_graph import Body, CapturedForward
from eagle_hal.engine.iteration_graph import VerifyExtendGraph
from eagle_hal.engine.page_allocator import PADDING_PAGE
from eagle_hal.engine.tree_graph import TreeGraph
from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import GraphCapture
from eagle_hal.hal.sampling import SamplingOps, TreeShape, VerifyTree
from eagle_hal.model.llama import ModelOutput

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.runner import ModelRunner

__all__ = ["DEFAULT_BUCKETS", "GraphRunner", "supports_replay"]

DEFAULT_BUCKETS: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
CAPTURED_MODES = frozenset(
    {ForwardMode.DECODE, ForwardMode.TARGET_VERIFY, ForwardMode.DRAFT_DECODE,
     ForwardMode.DRAFT_EXTEND}
)
MAX_TOKENS_PER_REQUEST = 64  # uniform forwards with more query tokens per request run eagerly
# extends of varying length (prefills, catch-ups) of one request replay padded to these
PREFILL_BUCKETS: tuple[int, ...] = (16, 32, 64, 96, 128, 192, 256, 384, 512)
# ... or, on backends with ``ragged_extend_graphs``, extends of any number of requests to these
# totals (the scheduler's default prefill budget is 4,096 tokens)
RAGGED_BUCKETS: tuple[int, ...] = PREFILL_BUCKETS + (768, 1024, 1536, 2048, 3072, 4096)
PREFILL_MODES = frozenset({ForwardMode.EXTEND, ForwardMode.DRAFT_EXTEND})


def supports_replay(attn: AttentionBackend) -> bool:
    """Whether ``attn`` implements the graph-replay hook (the base class's raises)."""
    return type(attn).plan_for_replay is not AttentionBackend.plan_for_replay


class GraphRunner:
    """Captured target and draft forwards for one ``ModelRunner``; see the module docstring.

    ``buckets`` are the padded batch sizes (sorted, positive); a batch of B requests runs
    in the smallest bucket >= B. ``chain_graphs`` / ``tree_graphs``: a draft chain's
    (K = 1) / tree's (K > 1) whole loop replays as one graph (else one graph per step);
    ``prefill_graphs``: extends of varying length replay padded to a token bucket (else
    they run eagerly). All three are on by default; off, they serve to compare the modes.
    """

    def __init__(
        self,
        runner: ModelRunner,
        capture: GraphCapture,
        buckets: Sequence[int] = DEFAULT_BUCKETS,
        *,
        chain_graphs: bool = True,
        tree_graphs: bool = True,
        prefill_graphs: bool = True,
    ) -> None:
        if not buckets or any(b < 1 for b in buckets):
            raise ValueError(f"graph buckets must be positive batch sizes, got {tuple(buckets)}")
        self.runner = runner
        self.capture = capture
        self.buckets = tuple(sorted(set(buckets)))
        self.pad_slot = PADDING_PAGE * runner.layout.page_size
        self._graphs: dict[tuple[object, ...], CapturedForward] = {}
        self._chains: dict[tuple[object, ...], ChainGraph] = {}
        self._trees: dict[tuple[object, ...], TreeGraph] = {}
        self._iterations: dict[tuple[object, ...], VerifyExtendGraph] = {}
        self._graph_state_ready: set[int] = set()  # id() of attention backends initialised
        self.replays = 0  # single forwards served by a graph (for diagnostics and tests)
        self.chain_replays = 0  # whole draft chain loops served by a graph
        self.tree_replays = 0  # whole draft tree loops served by a graph
        self.iteration_replays = 0  # overlapped verify-to-extend parts served by a graph
        # The chain loop as one graph (``chain_graph``). It equals the eager loop
        # (conformance ``graphs/chain_loop_equals_eager``: the same chain accept length
        # step by step and as one graph) and runs chain decoding faster (1.63x on an H200,
        # ``eagle-hal bench --modes chain`` against ``GraphRunner(chain_graphs=False)``).
        self.chain_graphs = chain_graphs
        # The tree loop (K > 1) as one graph (``tree_graph``). It equals the level-by-level
        # loop (conformance ``graphs/tree_loop_equals_eager``) and runs batch-1 tree
        # decoding faster (1.74x on an H200, ``eagle-hal bench --modes tree``). Its outputs
        # live outside the shared graph pool (``chain_graph.record_with_own_outputs``): a
        # verify graph captured before it would overwrite a tree kept in the pool
        # (tests/backends/cuda check it at two depths sharing one verify shape).
        self.tree_graphs = tree_graphs
        # One-request prefills and catch-ups padded to a token bucket (see the module
        # docstring).
        self.prefill_buckets = PREFILL_BUCKETS if prefill_graphs else ()
        # ... of several requests too, on backends with ``ragged_extend_graphs``
        self.ragged_buckets = RAGGED_BUCKETS if prefill_graphs else ()
        self.prefill_replays = 0  # prefills and catch-ups served by a token bucket graph

    @property
    def total_replays(self) -> int:
        """Graph replays of every kind: single forwards, draft loops, overlapped iterations."""
        return (self.replays + self.chain_replays + self.tree_replays + self.iteration_replays
                + self.prefill_replays)

    @property
    def num_graphs(self) -> int:
        return len(self._graphs) + len(self._chains) + len(self._trees) + len(self._iterations)

    def bucket_for(self, batch_size: int) -> int | None:
        """The smallest bucket holding ``batch_size`` requests, or ``None``."""
        index = bisect.bisect_left(self.buckets, batch_size)
        return self.buckets[index] if index < len(self.buckets) else None

    def _capturable(self, batch: ForwardBatch) -> int | None:
        """The bucket ``batch`` replays in, or ``None`` when it must run eagerly."""
        lens = batch.extend_lens_cpu
        if batch.mode not in CAPTURED_MODES or not lens:
            return None
        if any(n != lens[0] for n in lens) or not 1 <= lens[0] <= MAX_TOKENS_PER_REQUEST:
            return None
        return self.bucket_for(len(lens))

    def token_buckets(self, attn: AttentionBackend) -> tuple[int, ...]:
        """The token buckets of ``attn``'s prefill graphs: ``RAGGED_BUCKETS`` for any
        number of requests where it has ``ragged_extend_graphs``, else ``PREFILL_BUCKETS``
        for one request (``()`` with prefill graphs off)."""
        return self.ragged_buckets if attn.ragged_extend_graphs else self.prefill_buckets

    def prefill_requests(self, attn: AttentionBackend) -> int:
        """Requests in a prefill graph's static batch: one, or with ragged extends the
        largest bucket's requests and the padding request."""
        return self.buckets[-1] + 1 if attn.ragged_extend_graphs else 1

    def prefill_bucket(self, batch: ForwardBatch, attn: AttentionBackend) -> int | None:
        """The token bucket an extend (``EXTEND`` or ``DRAFT_EXTEND``) whose length varies
        replays in, padded, or ``None``: a tree, more tokens than the largest bucket,
        prefill graphs off; without ``ragged_extend_graphs``, several requests, or a
        prefix so long that the padded run would pass the end of the request's row in
        ``attn``'s token table (a backend may read keys through the table up to the
        padded length, as the NPU's fused attention does); with them, more requests than
        the largest bucket (the padding tokens are a request of their own there)."""
        lens = batch.extend_lens_cpu
        if (batch.mode not in PREFILL_MODES or not lens or batch.tree_mask is not None
                or batch.draft_kv_slots is not None):
            return None
        ragged = attn.ragged_extend_graphs
        if len(lens) > (self.buckets[-1] if ragged else 1):
            return None
        buckets = self.token_buckets(attn)
        index = bisect.bisect_left(buckets, sum(lens))
        if index == len(buckets):
            return None
        bucket = buckets[index]
        if not ragged and batch.prefix_lens_cpu[0] + bucket > attn.config.req_to_token.shape[1]:
            return None
        return bucket

    # -- the two model passes ---------------------------------------------------------------

    def run_target(
        self, batch: ForwardBatch, aux_layers: tuple[int, ...] = ()
    ) -> ModelOutput | None:
        """The target's ``ModelOutput`` for ``batch`` from a graph, or ``None`` (run it
        eagerly). Captures on first sight of a shape."""
        runner = self.runner
        target, attn = runner.target, runner.target_attn
        bucket, padded = self._capturable(batch), None
        if bucket is None:
            padded = (self.prefill_bucket(batch, attn) if batch.mode is ForwardMode.EXTEND
                      else None)
            if padded is None:
                return None
            bucket = self.prefill_requests(attn)
        key = ("target", *self._shape_key(batch, bucket, padded), aux_layers)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture_forward(
                batch, bucket, attn, None,
                lambda static, _: _flatten_output(
                    target.forward(static, attn, aux_layers=aux_layers)
                ),
                padded,
            )
            self._graphs[key] = entry
        outputs = self._replay(entry, batch, None, attn)
        return ModelOutput(outputs[0], tuple(outputs[1:]))

    def run_draft(
        self, batch: ForwardBatch, hidden: torch.Tensor, *, prefill: bool = False
    ) -> torch.Tensor | None:
        """The draft's output hidden states ``[T, H]`` for ``batch`` and input features
        ``hidden`` ``[T, H_in]`` from a graph, or ``None`` (run it eagerly). ``prefill``:
        an extend whose length varies from call to call (over a prompt, a catch-up): never
        a graph of its own length, only a token bucket's (``prefill_bucket``)."""
        runner = self.runner
        draft, attn = runner.draft, runner.draft_attn
        if draft is None or attn is None:
            return None
        if prefill:
            padded = self.prefill_bucket(batch, attn)
            bucket = None if padded is None else self.prefill_requests(attn)
        else:
            padded, bucket = None, self._capturable(batch)
        if bucket is None:
            return None
        key = ("draft", *self._shape_key(batch, bucket, padded), hidden.shape[1:], hidden.dtype)
        entry = self._graphs.get(key)
        if entry is None:
            entry = self._capture_forward(
                batch, bucket, attn, hidden,
                lambda static, features: (draft.forward(static, attn, static.input_ids, features),),
                padded,
            )
            self._graphs[key] = entry
        return self._replay(entry, batch, hidden, attn)[0]

    def run_draft_chain(
        self,
        steps: int,
        rows: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Sequence[int],
        scratch: torch.Tensor,
        first_tokens: torch.Tensor,
        hidden: torch.Tensor,
        roots: torch.Tensor,
    ) -> VerifyTree | None:
        """The chain draft's loop from one graph, or ``None``: see
        ``engine.graph_draft_loop.run_draft_chain``."""
        return graph_draft_loop.run_draft_chain(
            self, steps, rows, seq_lens, seq_lens_cpu, scratch, first_tokens, hidden, roots
        )

    def run_draft_tree(
        self,
        ops: SamplingOps,
        shape: TreeShape,
        rows: torch.Tensor,
        seq_lens: torch.Tensor,
        seq_lens_cpu: Sequence[int],
        scratch: torch.Tensor,
        probs: torch.Tensor,
        ids: torch.Tensor,
        hidden: torch.Tensor,
        roots: torch.Tensor,
    ) -> VerifyTree | None:
        """The tree draft's loop from one graph, or ``None``: see
        ``engine.graph_draft_loop.run_draft_tree``."""
        return graph_draft_loop.run_draft_tree(
            self, ops, shape, rows, seq_lens, seq_lens_cpu, scratch, probs, ids, hidden, roots
        )

    @torch.inference_mode()
    def run_verify_extend(
        self,
        ops: SamplingOps,
        shape: TreeShape,
        reserve: int,
        aux_layers: tuple[int, ...],
        vocab_size: int,
        rows: torch.Tensor,
        seq_lens: torch.Tensor,
        bounds: Sequence[int],
        slots: torch.Tensor,
        tree: VerifyTree,
    ) -> tuple[torch.Tensor, ...] | None:
        """An overlapped speculative iteration from its verify to the draft's next state
        (greedy; ``engine.iteration_graph``) as one graph, or ``None`` (run it eagerly): no
        bucket holds the batch, no draft, attention backends without
        ``multi_forward_graphs``, ``FULL`` masks, or more verify nodes per request than a
        captured forward takes. Captures on first sight of a (bucket, S, K, N).

        ``rows``/``seq_lens`` ``[B]`` int64 (the device's lengths), ``bounds`` upper bounds
        of them on the host, ``slots`` ``[B, >= reserve]`` the slots of positions
        ``seq_len ..``, ``tree`` the draft loop's verify tree. Returns the outputs listed in
        ``engine.iteration_graph`` for the B requests."""
        runner = self.runner
        attns = (runner.target_attn, runner.draft_attn)
        if runner.draft is None or any(a is None or not a.multi_forward_graphs for a in attns):
            return None
        if runner.tree_mask_mode == TreeMaskMode.FULL:
            return None
        if shape.num_draft_tokens > MAX_TOKENS_PER_REQUEST:
            return None
        bucket = self.bucket_for(len(bounds))
        if bucket is None:
            return None
        key = (bucket, shape, reserve, aux_layers, runner.tree_mask_mode)
        entry = self._iterations.get(key)
        if entry is None:
            for attn in attns:
                self._init_graph_state(attn)
            entry = VerifyExtendGraph.capture(
                self.capture, runner, ops, bucket=bucket, steps=shape.num_steps,
                topk=shape.topk, nodes=shape.num_draft_tokens, reserve=reserve,
                aux_layers=aux_layers, vocab_size=vocab_size, pad_slot=self.pad_slot,
            )
            self._iterations[key] = entry
        outputs = entry.replay(rows, seq_lens, bounds, slots, tree)
        self.iteration_replays += 1
        return outputs

    # -- capture and replay ---------------------------------------------------------------

    def _init_graph_state(self, attn: AttentionBackend) -> None:
        if id(attn) not in self._graph_state_ready:
            largest = self.buckets[-1] + 1  # (a ragged prefill's padding request)
            tokens = max(largest * MAX_TOKENS_PER_REQUEST, max(self.token_buckets(attn), default=0))
            attn.init_graph_state(largest, tokens)
            self._graph_state_ready.add(id(attn))

    @staticmethod
    def _shape_key(
        batch: ForwardBatch, bucket: int, padded: int | None = None
    ) -> tuple[object, ...]:
        """The graph's key; ``padded``: the token bucket of a padded extend."""
        depth = batch.draft_kv_slots.shape[1] if batch.draft_kv_slots is not None else 0
        if padded is not None:
            return (batch.mode, "padded", padded)
        return (batch.mode, bucket, batch.extend_lens_cpu[0], batch.num_branches, depth)

    def _capture_forward(
        self,
        batch: ForwardBatch,
        bucket: int,
        attn: AttentionBackend,
        hidden: torch.Tensor | None,
        body: Body,
        padded: int | None = None,
    ) -> CapturedForward:
        """``CapturedForward.capture`` of ``body`` over ``bucket`` requests (``padded``: a
        token bucket's tokens), with ``attn``'s graph state initialised first."""
        self._init_graph_state(attn)
        return CapturedForward.capture(
            self.capture, batch, bucket, attn, hidden, body, pad_slot=self.pad_slot,
            tree_mask_mode=self.runner.tree_mask_mode, padded=padded,
        )

    def _replay(
        self,
        entry: CapturedForward,
        batch: ForwardBatch,
        hidden: torch.Tensor | None,
        attn: AttentionBackend,
    ) -> tuple[torch.Tensor, ...]:
        outputs = entry.replay(batch, hidden, attn, self.runner.upload)
        if entry.padded:
            self.prefill_replays += 1
        else:
            self.replays += 1
        return outputs


def _flatten_output(output: Any) -> tuple[torch.Tensor, ...]:
    """A target ``ModelOutput`` as a flat tuple: hidden states, then aux hidden states."""
    return (output.hidden_states, *output.aux_hidden_states)

