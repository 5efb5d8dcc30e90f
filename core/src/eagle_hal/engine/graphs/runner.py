"""Device-graph capture of model forwards, per batch-size bucket.

``GraphRunner`` sits beside the ``ModelRunner`` and replaces an eager forward by the replay
of a captured one when it can. Each kind of graph is asked first and replayed after: the
caller asks ``can_replay_<kind>`` and, on ``True``, takes ``replay_<kind>``; on ``False``
it runs the same work eagerly. The kinds: ``target`` and ``draft`` (one forward),
``draft_loop`` (the draft's whole loop) and ``iteration`` (an overlapped iteration's
verify, accept and extend). A forward is capturable when every request has the same
number of query tokens (DECODE, TARGET_VERIFY, DRAFT_DECODE, and DRAFT_EXTEND when the
accepted lengths agree, e.g. always at batch size 1) and the batch fits a bucket. Graphs are
captured lazily, the first time a shape is seen, one per

    (model, mode, bucket, tokens per request, draft depth, aux layers),

each with its own static input buffers (the padded ``ForwardBatch`` it was captured with)
and static outputs; all graphs share the ``GraphCapture``'s memory pool.

Replay copies the real batch into the front of the static buffers, padded requests reading
and disturbing nothing real, then the attention backend's replay hooks run and the
outputs are sliced to the real tokens (``engine.graphs.forward``, which holds one captured
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
than the largest token bucket) is not replayed: ``can_replay_target``/``can_replay_draft``
say so and the caller runs eagerly.

The draft's loop, a chain's or a tree's, is captured whole, one graph per loop shape
(``engine.graphs.draft_loop``), and so is an overlapped iteration's verify-to-extend part
(``engine.graphs.iteration``). What those graphs record is the algorithm's own code, which
the caller passes in (``speculative.drafting`` its loop bodies, ``speculative.acceptance``
the verify, accept and extend): this package imports nothing of ``eagle_hal.speculative``.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import torch

from eagle_hal.engine.graphs.draft_loop import DraftLoopBody, DraftLoopGraph, is_chain
from eagle_hal.engine.graphs.forward import Body, CapturedForward
from eagle_hal.engine.graphs.iteration import VerifyExtendBody, VerifyExtendGraph
from eagle_hal.engine.page_allocator import PADDING_PAGE
from eagle_hal.hal.attention import AttentionBackend, ForwardBatch, ForwardMode
from eagle_hal.hal.graphs import GraphCapture
from eagle_hal.hal.sampling import TreeShape, VerifyTree
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.model.llama import ModelOutput

if TYPE_CHECKING:  # pragma: no cover - typing only
    from eagle_hal.engine.runner import ModelRunner
    from eagle_hal.speculative.drafting import DraftInputs

# a forward's replay plan: (bucket of requests, token bucket of a padded extend or None)
Plan = tuple[int, "int | None"]

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
    """Captured target and draft forwards, draft loops and overlapped iterations for one
    ``ModelRunner``; see the module docstring. Each kind replays through a pair:
    ``can_replay_<kind>(...)`` first, then ``replay_<kind>(...)`` only where it said yes.

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
        self._loops: dict[tuple[object, ...], DraftLoopGraph] = {}  # chains' and trees'
        self._iterations: dict[tuple[object, ...], VerifyExtendGraph] = {}
        self._graph_state_ready: set[int] = set()  # id() of attention backends initialised
        # the last forward asked about and its plan, which its replay then takes
        self._asked: tuple[ForwardBatch, str, Plan | None] | None = None
        self.replays = 0  # single forwards served by a graph (for diagnostics and tests)
        self.chain_replays = 0  # whole draft chain loops served by a graph
        self.tree_replays = 0  # whole draft tree loops served by a graph
        self.iteration_replays = 0  # overlapped verify-to-extend parts served by a graph
        # The chain loop as one graph (``draft_loop``). It equals the eager loop
        # (conformance ``graphs/chain_loop_equals_eager``: the same chain accept length
        # step by step and as one graph) and runs chain decoding faster (1.63x on an H200,
        # ``eagle-hal bench --modes chain`` against ``GraphRunner(chain_graphs=False)``).
        self.chain_graphs = chain_graphs
        # The tree loop (K > 1) as one graph (``draft_loop``). It equals the level-by-level
        # loop (conformance ``graphs/tree_loop_equals_eager``) and runs batch-1 tree
        # decoding faster (1.74x on an H200, ``eagle-hal bench --modes tree``). Its outputs
        # live outside the shared graph pool (``forward.record_with_own_outputs``): a
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
        return len(self._graphs) + len(self._loops) + len(self._iterations)

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

    # -- one forward: the target's, the draft's -------------------------------------------

    def can_replay_target(self, batch: ForwardBatch) -> bool:
        """Whether the target's forward over ``batch`` replays from a graph (captured on
        first sight of its shape by ``replay_target``); else the caller runs it eagerly."""
        plan = self._target_plan(batch)
        self._asked = (batch, "target", plan)
        return plan is not None

    def replay_target(self, batch: ForwardBatch, aux_layers: tuple[int, ...] = ()) -> ModelOutput:
        """The target's ``ModelOutput`` for ``batch`` from a graph, captured on first sight
        of a shape; only where ``can_replay_target(batch)``."""
        runner = self.runner
        target, attn = runner.target, runner.target_attn
        bucket, padded = self._plan_of(batch, "target")
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

    def can_replay_draft(self, batch: ForwardBatch, *, prefill: bool = False) -> bool:
        """Whether the draft's forward over ``batch`` replays from a graph; else the caller
        runs it eagerly. ``prefill``: an extend whose length varies from call to call (over
        a prompt, a catch-up): never a graph of its own length, only a token bucket's
        (``prefill_bucket``)."""
        plan = self._draft_plan(batch, prefill)
        self._asked = (batch, "prefill" if prefill else "draft", plan)
        return plan is not None

    def replay_draft(
        self, batch: ForwardBatch, hidden: torch.Tensor, *, prefill: bool = False
    ) -> torch.Tensor:
        """The draft's output hidden states ``[T, H]`` for ``batch`` and input features
        ``hidden`` ``[T, H_in]`` from a graph, captured on first sight of a shape; only
        where ``can_replay_draft(batch, prefill=prefill)``."""
        runner = self.runner
        draft, attn = runner.draft, runner.draft_attn
        assert attn is not None
        bucket, padded = self._plan_of(batch, "prefill" if prefill else "draft")
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

    def _target_plan(self, batch: ForwardBatch) -> Plan | None:
        bucket = self._capturable(batch)
        if bucket is not None:
            return bucket, None
        if batch.mode is not ForwardMode.EXTEND:
            return None
        attn = self.runner.target_attn
        padded = self.prefill_bucket(batch, attn)
        return None if padded is None else (self.prefill_requests(attn), padded)

    def _draft_plan(self, batch: ForwardBatch, prefill: bool) -> Plan | None:
        runner = self.runner
        attn = runner.draft_attn
        if runner.draft is None or attn is None:
            return None
        if not prefill:
            bucket = self._capturable(batch)
            return None if bucket is None else (bucket, None)
        padded = self.prefill_bucket(batch, attn)
        return None if padded is None else (self.prefill_requests(attn), padded)

    def _plan_of(self, batch: ForwardBatch, kind: str) -> Plan:
        """The plan ``can_replay_*`` found for ``batch`` as a forward of ``kind``
        (``"target"``, ``"draft"``, ``"prefill"``), computed again when another batch was
        asked about since."""
        asked = self._asked
        if asked is not None and asked[0] is batch and asked[1] == kind:
            plan = asked[2]
        elif kind == "target":
            plan = self._target_plan(batch)
        else:
            plan = self._draft_plan(batch, kind == "prefill")
        self._asked = None
        if plan is None:
            raise ValueError(f"a {batch.mode.value} forward of this batch has no graph: "
                             "ask can_replay_* first and run it eagerly")
        return plan

    # -- the draft's loop ------------------------------------------------------------------

    def can_replay_draft_loop(self, shape: TreeShape, inputs: DraftInputs) -> bool:
        """Whether the draft's loop of ``shape`` over ``inputs``'s requests replays as one
        graph (``engine.graphs.draft_loop``); else the caller runs it step by step, each
        step's forward still replaying its own graph where one applies. Not: the loop's
        kind switched off (``chain_graphs`` for a chain, ``tree_graphs`` for a tree), no
        bucket holds the batch, fewer than two levels, no draft, an attention without
        ``multi_forward_graphs`` (or, for a tree, whose ancestor slots are computed in the
        graph, without ``draft_slots_read_in_forward``), or ``FULL`` tree masks (sized by
        host lengths)."""
        runner = self.runner
        attn = runner.draft_attn
        chain = is_chain(shape)
        enabled = self.chain_graphs if chain else self.tree_graphs
        if not enabled or shape.num_steps < 2 or runner.draft is None or attn is None:
            return False
        if not attn.multi_forward_graphs or runner.tree_mask_mode == TreeMaskMode.FULL:
            return False
        if not chain and not attn.draft_slots_read_in_forward:
            return False
        return self.bucket_for(len(inputs.seq_lens)) is not None

    @torch.inference_mode()
    def replay_draft_loop(
        self, shape: TreeShape, inputs: DraftInputs, body: DraftLoopBody
    ) -> VerifyTree:
        """The draft's loop of ``shape`` and its verify tree from one graph that records
        ``body`` (the algorithm's loop), captured on first sight of a (bucket, shape);
        only where ``can_replay_draft_loop(shape, inputs)``. Writes the draft K/V of depths
        ``1 .. S - 1`` at their scratch slots. The tree's tokens and positions are fresh
        copies; its other tensors are views of the graph's outputs."""
        runner = self.runner
        attn, mask_mode, hidden = runner.draft_attn, runner.tree_mask_mode, inputs.state.hidden
        bucket = self.bucket_for(len(inputs.seq_lens))
        assert bucket is not None and attn is not None
        key = (bucket, shape, tuple(hidden.shape[1:]), hidden.dtype, mask_mode)
        loop = self._loops.get(key)
        if loop is None:
            self._init_graph_state(attn)
            loop = DraftLoopGraph.capture(
                self.capture, runner.draft, attn, body, bucket=bucket, shape=shape,
                hidden=hidden, mask_mode=mask_mode, pad_slot=self.pad_slot,
                slot_dtype=runner.slot_dtype,
            )
            self._loops[key] = loop
        tree = loop.replay(inputs)
        if loop.chain:
            self.chain_replays += 1
        else:
            self.tree_replays += 1
        return tree

    # -- an overlapped iteration's verify, accept and extend -------------------------------

    def can_replay_iteration(self, shape: TreeShape, inputs: DraftInputs) -> bool:
        """Whether an overlapped iteration of ``shape`` over ``inputs``'s requests replays
        from its verify to the draft's next state as one graph (greedy;
        ``engine.graphs.iteration``); else the caller runs it eagerly. Not: no bucket holds
        the batch, no draft, attention backends without ``multi_forward_graphs``, ``FULL``
        masks, or more verify nodes per request than a captured forward takes."""
        runner = self.runner
        if runner.draft is None:
            return False
        for attn in (runner.target_attn, runner.draft_attn):
            if attn is None or not attn.multi_forward_graphs:
                return False
        if runner.tree_mask_mode == TreeMaskMode.FULL:
            return False
        if shape.num_draft_tokens > MAX_TOKENS_PER_REQUEST:
            return False
        return self.bucket_for(len(inputs.seq_lens)) is not None

    @torch.inference_mode()
    def replay_iteration(
        self,
        shape: TreeShape,
        reserve: int,
        aux_layers: tuple[int, ...],
        inputs: DraftInputs,
        tree: VerifyTree,
        body: VerifyExtendBody,
    ) -> tuple[torch.Tensor, ...]:
        """The iteration from the verify of ``tree`` (the draft loop's) to the draft's next
        state from one graph that records ``body`` (the algorithm's verify, accept and
        extend), captured on first sight of a (bucket, shape, reserve, aux layers); only
        where ``can_replay_iteration(shape, inputs)``. ``inputs``: the draft loop's (its
        ``seq_lens`` upper bounds of the lengths, its ``scratch`` ``[B, >= reserve]`` the
        slots of positions ``seq_len ..``). Returns ``body``'s outputs for the B requests."""
        runner = self.runner
        bucket = self.bucket_for(len(inputs.seq_lens))
        assert bucket is not None
        key = (bucket, shape, reserve, aux_layers, runner.tree_mask_mode)
        entry = self._iterations.get(key)
        if entry is None:
            for attn in (runner.target_attn, runner.draft_attn):
                assert attn is not None
                self._init_graph_state(attn)
            entry = VerifyExtendGraph.capture(
                self.capture, runner, body, bucket=bucket, shape=shape, reserve=reserve,
                aux_layers=aux_layers, pad_slot=self.pad_slot,
            )
            self._iterations[key] = entry
        outputs = entry.replay(inputs, tree)
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

