"""Checking tensor parallelism against one process, on any backend.

A ``Scenario`` is a tiny random Llama (from ``eagle_hal.testing.models``), a draft head or
none, a speculation setting and prompts. ``run_scenario`` generates with it in the calling
process: whole when the context is single, sharded over the context's ranks otherwise.
``check_rank`` is the program each spawned rank runs (it writes its results as JSON);
tests compare those results with a single-process run of the same scenarios.

On a host with several accelerators::

    python -m eagle_hal.parallel.checks --device <kind> --tp 2

runs the default scenarios over 2 ranks with the backend's collective and on one device,
and exits non-zero unless the tokens agree (greedy: with the single-device run and with
plain decoding; sampled: across ranks).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from eagle_hal.backend import Backend
from eagle_hal.engine.request import SamplingParams
from eagle_hal.parallel.context import ParallelContext
from eagle_hal.speculative.config import SpecConfig

__all__ = ["DEFAULT_SCENARIOS", "Scenario", "check_rank", "compare", "run_scenario", "run_sharded"]

PROMPTS: tuple[tuple[int, ...], ...] = (
    (1, 2, 3, 4, 5),
    (7, 8, 9),
    tuple(range(10, 40)),
    (42,),
    (5, 5, 5, 5, 6, 6, 6, 6, 7),
)


@dataclasses.dataclass(frozen=True, slots=True)
class Scenario:
    """One generation run over a tiny model. ``worker_seed=None`` lets each rank draw its
    own base seed (the broadcast from rank 0 must make them agree)."""

    name: str
    spec: SpecConfig
    params: SamplingParams
    target: str = "near_bigram"  # or "random"
    draft: bool = True
    worker_seed: int | None = 0
    vocab: int = 62  # even: the vocabulary splits without padding over 2 ranks
    prompts: tuple[tuple[int, ...], ...] = PROMPTS
    draft_vocab: tuple[int, ...] = ()  # the head drafts from these ids only (none: all)


DEFAULT_SCENARIOS: tuple[Scenario, ...] = (
    Scenario("plain", SpecConfig(num_steps=0), SamplingParams(max_tokens=24), draft=False),
    Scenario("chain", SpecConfig(3, 1, 4), SamplingParams(max_tokens=24)),
    Scenario("tree", SpecConfig(3, 2, 6), SamplingParams(max_tokens=24)),
    Scenario("random_plain", SpecConfig(num_steps=0), SamplingParams(max_tokens=16),
             target="random", draft=False, vocab=61),
    Scenario("random_tree", SpecConfig(2, 2, 4), SamplingParams(max_tokens=16),
             target="random", vocab=61),
    # a draft vocabulary gathered from a padded vocabulary-parallel lm_head (ids on both shards)
    Scenario("vocab_tree", SpecConfig(2, 2, 4), SamplingParams(max_tokens=16),
             target="random", vocab=61, draft_vocab=tuple(range(60, -1, -3))),
    Scenario("sampled", SpecConfig(3, 2, 6),
             SamplingParams(max_tokens=24, temperature=0.8, top_k=20), worker_seed=None),
    Scenario("adaptive", SpecConfig(4, 2, 6, adaptive=True, adaptive_steps=(0, 2, 4)),
             SamplingParams(max_tokens=24, temperature=0.7, seed=99)),
)


def _models(scenario: Scenario, device: torch.device) -> tuple[Any, Any]:
    from eagle_hal.testing.models import (
        matching_eagle1,
        near_bigram_target,
        tiny_eagle1,
        tiny_target,
    )

    if scenario.target == "near_bigram":
        target = near_bigram_target(seed=5, vocab=scenario.vocab, device=device)
        head = matching_eagle1(target, noise=0.02) if scenario.draft else None
    else:
        target = tiny_target(seed=11, vocab=scenario.vocab, device=device)
        head = tiny_eagle1(target, seed=12) if scenario.draft else None
    return target, head


def run_scenario(scenario: Scenario, backend: Backend, context: ParallelContext) -> dict[str, Any]:
    """Generate ``scenario`` on ``backend``; the target is sharded over ``context``'s ranks
    (whole with one rank). Returns ``{"tokens": [[...] per prompt], "base_seed": int}``."""
    from eagle_hal.api import LLM
    from eagle_hal.parallel.sharding import shard_llama

    target, head = _models(scenario, backend.torch_device)
    if context.is_parallel:
        # The head was built against the whole target; rebuild its references to the
        # target's embedding and lm_head on the sharded one (the head runs replicated).
        sharded = shard_llama(target, context)
        if head is not None:
            head = _rebind_head(head, sharded)
        target = sharded
    if head is not None and scenario.draft_vocab:
        head = head.with_vocabulary(torch.tensor(scenario.draft_vocab))
    llm = LLM.from_models(backend, target, head, spec=scenario.spec, seed=scenario.worker_seed)
    outputs = llm.generate([list(p) for p in scenario.prompts], scenario.params)
    return {
        "tokens": [list(o.token_ids) for o in outputs],
        "base_seed": llm.worker.context.sampling.base_seed,
        "prompt_logits": _prompt_logits(llm, scenario.prompts[0]),
    }


def _prompt_logits(llm: Any, prompt: Sequence[int]) -> list[list[float]]:
    """The target's float32 logits ``[len(prompt), vocab]`` at every prompt position (one
    EXTEND forward through the engine's runner; the KV row is released after)."""
    from eagle_hal.hal.attention import ForwardMode

    runner = llm.runner
    row = runner.table.add_request()
    try:
        runner.table.reserve(row, len(prompt))
        runner.sync_table()
        batch = runner.causal_batch(ForwardMode.EXTEND, runner.long(list(prompt)), [row], [0],
                                    [len(prompt)])
        with torch.inference_mode():
            logits = runner.target.compute_logits(runner.run_target(batch).hidden_states)
    finally:
        runner.table.release(row)
    return logits.cpu().tolist()


def _rebind_head(head: Any, target: Any) -> Any:
    """A copy of an EAGLE-1 ``head`` bound to ``target`` (same weights)."""
    from eagle_hal.model.eagle import Eagle1DraftModel

    rebound = Eagle1DraftModel(head.config, target, fc_bias=head.fc.bias is not None,
                               dtype=head.dtype)
    rebound.load_state_dict(head.state_dict())
    return rebound.eval()


def check_rank(
    context: ParallelContext, backend: Backend, scenarios: Sequence[Scenario], out_dir: str
) -> None:
    """The program each rank runs: every scenario, results to ``out_dir/rank{r}.json``."""
    results = {s.name: run_scenario(s, backend, context) for s in scenarios}
    path = Path(out_dir) / f"rank{context.rank}.json"
    path.write_text(json.dumps(results), encoding="utf-8")


def run_sharded(
    scenarios: Sequence[Scenario],
    world_size: int,
    *,
    device: str = "cpu",
    backend: str | None = None,
) -> list[dict[str, Any]]:
    """Run ``scenarios`` over ``world_size`` spawned ranks; each rank's results, in order."""
    from eagle_hal.parallel.launch import spawn_ranks

    with tempfile.TemporaryDirectory(prefix="eagle-hal-tp-check-") as out_dir:
        spawn_ranks(check_rank, world_size, (tuple(scenarios), out_dir), device=device,
                    backend=backend)
        return [
            json.loads((Path(out_dir) / f"rank{r}.json").read_text(encoding="utf-8"))
            for r in range(world_size)
        ]


def compare(
    scenarios: Sequence[Scenario], ranks: list[dict[str, Any]], single: dict[str, dict[str, Any]]
) -> list[str]:
    """What disagrees: ranks with each other (every scenario), greedy scenarios with the
    single-process run and with plain decoding of the same target. Empty when all agree."""
    problems = []
    plain_of = {s.target: s.name for s in scenarios if not s.draft and s.params.greedy}
    for scenario in scenarios:
        name = scenario.name
        for rank, result in enumerate(ranks[1:], 1):
            if result[name] != ranks[0][name]:
                problems.append(f"{name}: rank {rank} differs from rank 0")
        if not scenario.params.greedy:
            continue
        if ranks[0][name]["tokens"] != single[name]["tokens"]:
            problems.append(f"{name}: tensor-parallel tokens differ from the single-process run")
        plain = plain_of.get(scenario.target)
        if plain is not None and ranks[0][name]["tokens"] != ranks[0][plain]["tokens"]:
            problems.append(f"{name}: tensor-parallel tokens differ from plain decoding")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="device kind, e.g. cpu or an accelerator's")
    parser.add_argument("--backend", default=None)
    parser.add_argument("--tp", type=int, default=2)
    args = parser.parse_args(argv)
    from eagle_hal.parallel.launch import device_for_rank
    from eagle_hal.registry import select_backend

    ranks = run_sharded(DEFAULT_SCENARIOS, args.tp, device=args.device, backend=args.backend)
    backend = select_backend(device_for_rank(args.device, 0), backend=args.backend)
    single_context = ParallelContext.single(backend.torch_device)
    single = {s.name: run_scenario(s, backend, single_context) for s in DEFAULT_SCENARIOS}
    problems = compare(DEFAULT_SCENARIOS, ranks, single)
    for scenario in DEFAULT_SCENARIOS:
        tokens = sum(len(t) for t in ranks[0][scenario.name]["tokens"])
        print(f"{scenario.name:>12}: {tokens} tokens")
    for problem in problems:
        print(f"FAIL {problem}")
    print(f"tp={args.tp} on {args.device} ({backend.capabilities.distributed_backend}): "
          f"{'OK' if not problems else 'FAILED'}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
