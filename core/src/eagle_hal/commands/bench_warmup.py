"""What ``eagle-hal bench`` does before it times anything, and what it watches while it does.

A timed run must hold no one-off cost: no graph captured, no kernel compiled, no adaptive
controller still warming up. ``warm_up`` runs each batch size a run passes through as its
requests finish (every depth the controller may probe, then until it has settled), the
prefill lengths and token buckets the run can reach, and every timed prompt's prefill.
``KernelCompiles`` counts the Triton compiles a timed run still hit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

__all__ = ["KernelCompiles", "settle", "warm_up", "warm_up_depths", "warm_up_prefills",
           "warm_up_sizes"]


def warm_up_sizes(llm: Any, batch_size: int) -> list[int]:
    """Batch sizes to warm ``llm`` up with before timing, largest first: ``batch_size``,
    with device graphs on every smaller graph bucket, and in the adaptive mode every
    smaller bucket of the controller. As requests finish, a run at ``batch_size`` shrinks
    through those sizes; without this their graphs would be captured, and the controller's
    warm-up at each new bucket run, inside the timed run. In the adaptive mode each size
    also runs once at every depth the controller may probe (``warm_up_depths``). Not
    covered, so still captured while timed when first seen: a draft extend over an accepted
    length the warm-up never had (its graphs are keyed by the length; the row's
    ``captures_while_timed`` counts them)."""
    sizes = {batch_size}
    graphs = getattr(llm.runner, "graphs", None)
    if graphs is not None:
        sizes.update(b for b in graphs.buckets if b < batch_size)
    controller = getattr(llm.worker, "controller", None)
    if controller is not None:
        sizes.update(b for b in controller.bucket_sizes if b < batch_size)
    return sorted(sizes, reverse=True)


def warm_up_depths(worker: Any) -> list[int]:
    """The draft depths to warm up at every size before timing: in the adaptive mode each
    depth the controller may probe (every new (bucket, S) captures its graphs: verify and
    draft at S > 0, the decode graph at S = 0, which a bucket seeded at S > 0 probes
    within its first iterations), which inside the timed run cost more than the probe
    measures; none otherwise."""
    if getattr(worker, "controller", None) is None:
        return []
    return list(worker.spec.adaptive_steps)


def warm_up_prefills(llm: Any, prompt: list[int], reach: int = 0) -> None:
    """Prefill one prompt of each length for which an attention backend compiles a kernel
    variant (``AttentionBackend.warm_up_lengths``): otherwise the timed run's prompts and
    catch-ups of new lengths compile them, about a second each. With device graphs, also
    one prefill of each token bucket (``GraphRunner.token_buckets``) up to ``reach``
    tokens (at least one prompt's longest; in the adaptive mode, whose catch-ups replay
    from these graphs too, a whole batch's context), which captures the bucket's prefill
    graphs (the target's and the draft's) before the timed run: one prompt of the bucket's
    length or, past the longest prompt the context allows, several prompts at once."""
    from eagle_hal.engine.request import SamplingParams

    runner = llm.runner
    lengths: set[int] = set()
    for attn in (runner.target_attn, getattr(runner, "draft_attn", None)):
        if attn is not None:
            lengths.update(attn.warm_up_lengths())
    limit = llm.engine.scheduler.config.max_context - llm.worker.headroom(1) - 2
    params = SamplingParams(max_tokens=1, ignore_eos=True)
    for length in sorted(n for n in lengths if 1 <= n <= limit):
        llm.generate([(prompt * length)[:length]], params)
    graphs = getattr(runner, "graphs", None)
    if graphs is None or limit < 1:
        return
    config = llm.engine.scheduler.config
    buckets = set(graphs.token_buckets(runner.target_attn))
    draft_attn = getattr(runner, "draft_attn", None)
    if draft_attn is not None:
        buckets.update(graphs.token_buckets(draft_attn))
    if not runner.target_attn.ragged_extend_graphs:  # one prompt per prefill graph
        reach = limit
    elif getattr(llm.worker, "controller", None) is not None:
        # the draft's catch-ups after a stretch at S = 0 replay from the same graphs, over
        # as many lagging tokens as the batch holds
        reach = max(reach, config.max_batch_size * limit)
    reach = min(max(reach, limit), config.max_prefill_tokens)
    for bucket in sorted(buckets):
        total = min(bucket, reach)
        count = -(-total // limit)  # prompts of at most ``limit`` tokens
        if count > config.max_batch_size:
            break
        if total in lengths and count == 1:
            continue
        sizes = [total // count + (i < total % count) for i in range(count)]
        llm.generate([(prompt * n)[:n] for n in sizes], params)
        if bucket >= reach:
            break


def settle(llm: Any, batch: list[list[int]], params: Any, max_rounds: int = 8) -> None:
    """Generate ``batch`` until the adaptive controller has settled at its size (at most
    ``max_rounds`` generations; one without a controller): its warm-up runs every depth,
    the deepest first, and left unfinished it would run inside the timed run."""
    controller = getattr(llm.worker, "controller", None)
    for _ in range(max_rounds):
        llm.generate(batch, params)
        if controller is None or controller.is_settled(len(batch)):
            return


def warm_up(llm: Any, prompts: list[list[int]], params: Any, batch_size: int) -> None:
    """Everything before the timed runs: each size the run passes through (every depth
    the adaptive controller may probe, then until it has settled), and the prefills."""
    # EOS ignored: a warm-up that ends early would leave graphs or the controller's
    # warm-up to the timed run
    warm_params = dataclasses.replace(
        params, max_tokens=min(32, params.max_tokens), ignore_eos=True
    )
    worker = llm.worker
    for size in warm_up_sizes(llm, batch_size):
        batch = [prompts[i % len(prompts)] for i in range(size)]
        for steps in warm_up_depths(worker):
            spec, controller = worker.spec, worker.controller
            worker.spec, worker.controller = spec.with_steps(steps), None  # this depth only
            try:
                llm.generate(batch, warm_params)
            finally:
                worker.spec, worker.controller = spec, controller
        settle(llm, batch, warm_params)
    longest = sorted((len(p) for p in prompts), reverse=True)[:batch_size]
    warm_up_prefills(llm, prompts[0], reach=sum(longest))
    # every timed prompt's prefill: a kernel specialised on a length or an offset
    # (Triton's divisibility by 16) compiles here, not inside a timed run (two attention
    # compiles inside a timed plain run on an H200 cut its rate by a third; ``eagle-hal
    # bench`` lists them as ``kernels_compiled_while_timed``). The first wave is batched
    # as in the timed run; later prompts join a timed run one by one as requests finish,
    # which this cannot reproduce (the runner's 16-byte-aligned views keep those from
    # compiling)
    llm.generate(list(prompts), dataclasses.replace(params, max_tokens=1, ignore_eos=True))


class KernelCompiles:
    """Counts Triton kernel compilations inside a ``with`` block, through Triton's
    post-compile hook (chained to any hook already set). ``count`` is ``None`` where the
    hook does not exist (Triton before 3.4, or no Triton): a compile costs a GPU run
    hundreds of milliseconds that ``captures_while_timed`` does not see."""

    def __init__(self) -> None:
        self.count: int | None = None
        self.kernels: list[str] = []  # what compiled: Triton's repr (name, specialisation)
        self._knobs: Any = None
        self._previous: Any = None

    def __enter__(self) -> KernelCompiles:
        try:
            import triton

            knobs = triton.knobs.runtime
            self._previous = knobs.jit_post_compile_hook
        except (ImportError, AttributeError):
            return self
        self._knobs, self.count = knobs, 0
        previous = self._previous

        def hook(*args: Any, **kwargs: Any) -> Any:
            self.count = (self.count or 0) + 1
            # whole: the argument list's specialisations (a pointer's alignment, an
            # integer's divisibility by 16) tell which argument made a new variant
            self.kernels.append(str(kwargs.get("repr", "?"))[:8000])
            return previous(*args, **kwargs) if previous is not None else None

        knobs.jit_post_compile_hook = hook
        return self

    def __exit__(self, *exc: object) -> None:
        if self._knobs is not None:
            self._knobs.jit_post_compile_hook = self._previous
