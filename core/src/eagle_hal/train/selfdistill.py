"""Magpie-style self-distillation: the target writes the user prompts and then answers them.

No external data set is read and no benchmark prompt is ever seen. For each prompt index:

1. the chat template's opening of a user turn (system prompt included, when the template
   adds one) is the context, followed by an opener (``prompt_openers``, optional: a few
   generic words such as "Write a Python function" that steer the kind of request; the
   free, unsteered prompt is one of them); the target samples the rest of the user's
   message until it ends its turn (EOS) or reaches ``max_prompt_tokens`` — temperatures
   cycle through ``prompt_temperatures``, each request has its own seed;
2. that message, put back through the chat template with the assistant's generation
   prompt, is answered by the target (temperatures cycle through ``answer_temperatures``,
   0 is greedy) until EOS or ``max_new_tokens``.

Both phases run on the engine with plain decoding (no draft head), many requests at once;
an answer is queued the moment its prompt is written, so the batch stays full. Empty and
duplicate prompts (and prompts that are the opener alone) are dropped. Every
``round(1 / validation_fraction)``-th prompt is held out for validation.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Sequence
from typing import Any, Protocol

from eagle_hal.backend import Backend
from eagle_hal.engine.request import FinishReason, Request, SamplingParams
from eagle_hal.engine.step_ledger import StepLedger
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.train.dataset import DatasetInfo, DistillDataset

__all__ = [
    "ChatTokenizer", "DistillConfig", "Shard", "build_dataset", "generate_dataset",
    "generate_shard", "graph_buckets", "user_turn_prefix",
]

_MARKER = "\u2402EAGLE-HAL-USER-TURN\u2402"  # never produced by a tokenizer's decode
_MIN_CANCELLED_ANSWER = 16  # a time-budget cut keeps partial answers at least this long


class ChatTokenizer(Protocol):
    """What generation needs from a tokenizer (``eagle_hal.model.loading.Tokenizer``)."""

    eos_token_ids: tuple[int, ...]

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = False) -> str: ...

    def apply_chat_template(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = True,
        tokenize: bool = True,
        **extra: Any,
    ) -> Any: ...


@dataclasses.dataclass(frozen=True, slots=True)
class DistillConfig:
    """How much to generate and how to sample it."""

    num_prompts: int = 3000
    max_prompt_tokens: int = 96
    max_new_tokens: int = 256
    prompt_temperatures: tuple[float, ...] = (0.8, 1.0, 1.2)
    prompt_openers: tuple[str, ...] = ()  # () = every prompt free (plain Magpie)
    answer_temperatures: tuple[float, ...] = (0.0, 0.0, 0.5, 0.8)
    top_p: float = 0.95
    validation_fraction: float = 0.05
    seed: int = 0
    max_batch_size: int = 64
    time_budget_s: float | None = None  # see generate_dataset

    def __post_init__(self) -> None:
        if self.num_prompts < 2:
            raise ValueError(f"num_prompts must be >= 2 (one held out), got {self.num_prompts}")
        if self.max_prompt_tokens < 1 or self.max_new_tokens < 1:
            raise ValueError("max_prompt_tokens and max_new_tokens must be >= 1")
        if not self.prompt_temperatures or not self.answer_temperatures:
            raise ValueError("give at least one prompt and one answer temperature")
        if not 0.0 < self.validation_fraction < 1.0:
            raise ValueError(
                f"validation_fraction must lie in (0, 1), got {self.validation_fraction}"
            )

    def opener(self, index: int) -> str:
        """The opener of prompt ``index``: each opener meets every prompt temperature."""
        if not self.prompt_openers:
            return ""
        turn = index // len(self.prompt_temperatures)
        return self.prompt_openers[turn % len(self.prompt_openers)]

    @property
    def validation_every(self) -> int:
        return max(2, round(1.0 / self.validation_fraction))

    @property
    def max_context(self) -> int:
        """Context the answers need: template + prompt + answer, with room to spare."""
        return 2 * self.max_prompt_tokens + self.max_new_tokens + 128


def _time_report(ledger: StepLedger, seconds: float) -> str:
    """Where generation's wall time went, by step kind (``engine.step_ledger``): a step is
    charged the time since the previous one ended, so the host's work between steps
    (tokenizing prompts, queueing answers) counts in the step after it."""
    parts = []
    for kind, buckets in ledger.summary().items():
        steps = sum(b["steps"] for b in buckets.values())
        spent = sum(b["seconds"] for b in buckets.values())
        batch = sum(b["mean_batch"] * b["steps"] for b in buckets.values()) / max(steps, 1)
        parts.append(f"{kind} {spent:.0f} s in {steps} steps ({1e3 * spent / max(steps, 1):.2f} "
                     f"ms a step, mean batch {batch:.0f})")
    return f"self-distilling took {seconds:.0f} s: " + "; ".join(parts)


def graph_buckets(max_batch_size: int) -> tuple[int, ...]:
    """The engine's default graph buckets, extended by steps of about 1.5x (rounded to a
    multiple of 16) so that every batch size up to ``max_batch_size`` fits one."""
    from eagle_hal.engine.graphs.runner import DEFAULT_BUCKETS

    buckets = [b for b in DEFAULT_BUCKETS if b < max_batch_size] or [1]
    while buckets[-1] < max_batch_size:
        buckets.append(min(max_batch_size, -(-buckets[-1] * 3 // 2 // 16) * 16))
    return tuple(buckets)


def user_turn_prefix(tokenizer: ChatTokenizer) -> list[int]:
    """Token ids of the chat template up to where a user's message begins."""
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": _MARKER}], add_generation_prompt=False, tokenize=False
    )
    if _MARKER not in text:
        raise ValueError("the chat template does not render the user's message verbatim")
    return list(tokenizer.encode(text[: text.index(_MARKER)], add_special_tokens=False))


@dataclasses.dataclass(slots=True)
class _Job:
    index: int  # prompt index
    answering: bool
    temperature: float
    opener_ids: tuple[int, ...] = ()  # the prompt's opener, before what the target wrote
    prompt_ids: list[int] | None = None  # the templated prompt, once answering


Kept = tuple[int, list[int], int, float]  # (prompt index, sequence, answer start, temperature)


@dataclasses.dataclass(slots=True)
class Shard:
    """What one shard of the prompts produced (``generate_shard``)."""

    kept: list[Kept]
    seconds: float
    report: str  # where its time went (``_time_report``)


def generate_dataset(
    backend: Backend,
    target: LlamaForCausalLM,
    tokenizer: ChatTokenizer,
    config: DistillConfig,
    *,
    target_name: str = "",
    target_sha256: str = "",
    command: str = "",
    progress: bool = True,
) -> DistillDataset:
    """Generate a self-distilled data set on ``backend`` with plain decoding.

    Under ``config.time_budget_s``, new prompts stop being issued once the time left would
    no longer cover a whole exchange (prompt + answer tokens at the measured time per
    engine step); at the budget, what still runs is cut (answers of 16+ tokens are kept).
    Raises ``RuntimeError`` when nothing usable was generated (e.g. a tiny budget).
    """
    shard = generate_shard(backend, target, tokenizer, config, progress=progress)
    if progress:
        print(shard.report, file=sys.stderr)
    return build_dataset([shard], config, target_name=target_name, target_sha256=target_sha256,
                         command=command)


def generate_shard(
    backend: Backend,
    target: LlamaForCausalLM,
    tokenizer: ChatTokenizer,
    config: DistillConfig,
    *,
    shard: tuple[int, int] = (0, 1),
    deadline: float | None = None,
    progress: bool = True,
) -> Shard:
    """``generate_dataset``'s generation for the prompt indices ``i, i + n, i + 2n, …`` below
    ``config.num_prompts`` (``shard = (i, n)``): every prompt's opener, temperatures and
    sampling seeds follow from its index alone, so shards in separate processes
    (``train.distill_workers``) generate the same prompts and answers as one process.
    ``deadline`` (``time.time()``) replaces ``config.time_budget_s``, which counts from
    the end of this call's set-up."""
    from tqdm import tqdm

    from eagle_hal.api import LLM
    from eagle_hal.speculative.config import SpecConfig

    # No tokenizer in the engine: nothing here needs text as it streams (detokenising every
    # step costs host time per request); EOS comes in as stop token ids.
    llm = LLM.from_models(
        backend,
        target,
        None,
        None,
        SpecConfig(num_steps=0),
        max_batch_size=config.max_batch_size,
        max_context=config.max_context,
        seed=config.seed,
        min_admit=max(1, config.max_batch_size // 8),
    )
    # Device graphs where the backend captures them, with buckets up to the batch size: at
    # 100+ requests an eager decode step is launch-bound (about 3x slower on an H200).
    graphs = llm.runner.enable_graphs(graph_buckets(config.max_batch_size))
    if progress:
        print(f"self-distilling on {backend.name}: up to {config.max_batch_size} requests at "
              f"once, device graphs {'on' if graphs else 'off'}", file=sys.stderr)
    engine = llm.engine
    engine.ledger = ledger = StepLedger()  # where the time went, printed at the end
    prefix = user_turn_prefix(tokenizer)
    opener_ids = {
        text: tuple(tokenizer.encode(text, add_special_tokens=False)) if text else ()
        for text in set(config.prompt_openers) | {""}
    }
    eos = tuple(tokenizer.eos_token_ids)
    started = time.perf_counter()
    ledger.start(started)
    budget = config.time_budget_s if deadline is None else deadline - time.time()
    jobs: dict[int, tuple[Request, _Job]] = {}
    seen_prompts: set[str] = set()
    kept: list[Kept] = []
    issued, generated_tokens, engine_steps = 0, 0, 0
    exchange_steps = config.max_prompt_tokens + config.max_new_tokens + 2  # decode steps, at most
    first, every = shard
    if not 0 <= first < every:
        raise ValueError(f"shard {shard}: expected (i, n) with 0 <= i < n")
    bar = tqdm(
        total=len(range(first, config.num_prompts, every)),
        desc="self-distilling" + (f" (shard {first + 1} of {every})" if every > 1 else ""),
        unit=" answers",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )

    def submit(ids: list[int], job: _Job, max_tokens: int) -> None:
        params = SamplingParams(
            temperature=job.temperature,
            top_p=config.top_p if job.temperature > 0 else 1.0,
            seed=config.seed * 1_000_003 + 2 * job.index + int(job.answering),
            max_tokens=max_tokens,
            stop_token_ids=eos,
        )
        request = engine.add_request(ids, params)
        jobs[request.request_id] = (request, job)

    def keep_answer(job: _Job, request: Request) -> bool:
        answer = list(request.output_ids)
        if request.finish_reason is FinishReason.STOP and eos:
            # the stop token is not in the output; the first EOS id stands for it
            answer.append(eos[0])
        if not answer or job.prompt_ids is None:
            return False
        kept.append((job.index, job.prompt_ids + answer, len(job.prompt_ids), job.temperature))
        return True

    while True:
        elapsed = time.perf_counter() - started
        out_of_time = budget is not None and elapsed >= budget
        step_seconds = elapsed / engine_steps if engine_steps else 0.0
        stop_issuing = (
            budget is not None and elapsed + 1.2 * exchange_steps * step_seconds >= budget
        )
        while (
            first + issued * every < config.num_prompts
            and len(jobs) < 2 * config.max_batch_size
            and not stop_issuing
        ):
            index = first + issued * every
            temperature = config.prompt_temperatures[index % len(config.prompt_temperatures)]
            opener = opener_ids[config.opener(index)]
            submit(
                prefix + list(opener),
                _Job(index, answering=False, temperature=temperature, opener_ids=opener),
                config.max_prompt_tokens,
            )
            issued += 1
        if out_of_time or not jobs:
            break
        engine_steps += 1
        for delta in engine.step():
            generated_tokens += len(delta.token_ids)
            if not delta.finished:
                continue
            request, job = jobs.pop(delta.request_id)
            engine.forget(request)
            failed = request.finish_reason is FinishReason.ERROR
            if job.answering:
                if not failed and keep_answer(job, request):
                    bar.update(1)
                else:
                    bar.total -= 1
                continue
            user_text = tokenizer.decode(
                list(job.opener_ids) + list(request.output_ids), skip_special_tokens=True
            ).strip()
            written = tokenizer.decode(request.output_ids, skip_special_tokens=True)
            wrote_nothing = not written.strip()  # the opener alone is no prompt
            if failed or wrote_nothing or user_text in seen_prompts:
                bar.total -= 1
                continue
            seen_prompts.add(user_text)
            templated = list(
                tokenizer.apply_chat_template([{"role": "user", "content": user_text}])
            )
            temperature = config.answer_temperatures[job.index % len(config.answer_temperatures)]
            answer_job = _Job(
                job.index, answering=True, temperature=temperature, prompt_ids=templated
            )
            submit(templated, answer_job, config.max_new_tokens)
        seconds = time.perf_counter() - started
        bar.set_postfix(tokens_per_s=f"{generated_tokens / max(seconds, 1e-9):.0f}", refresh=False)

    for request, job in list(jobs.values()):  # out of time: cut what is still running
        engine.cancel(request.request_id)
        if job.answering and len(request.output_ids) >= _MIN_CANCELLED_ANSWER:
            keep_answer(job, request)
        engine.forget(request)
    bar.close()
    seconds = time.perf_counter() - started
    return Shard(kept, seconds, _time_report(ledger, seconds))


def build_dataset(
    shards: Sequence[Shard],
    config: DistillConfig,
    *,
    target_name: str = "",
    target_sha256: str = "",
    command: str = "",
    seconds: float | None = None,
) -> DistillDataset:
    """The data set of what ``shards`` kept, in prompt order, generated in ``seconds`` (the
    longest shard's time if not given). A prompt that several shards wrote alike is kept
    once, at its lowest index (within a shard the first written is the one answered).
    Raises ``RuntimeError`` when nothing usable was generated."""
    unique: dict[tuple[int, ...], Kept] = {}  # by the templated prompt's ids
    for item in sorted((k for shard in shards for k in shard.kept), key=lambda k: k[0]):
        unique.setdefault(tuple(item[1][: item[2]]), item)
    items = list(unique.values())
    if seconds is None:
        seconds = max((shard.seconds for shard in shards), default=0.0)
    held_out = [index % config.validation_every == 0 for index, _, _, _ in items]
    if not items or all(held_out) or not any(held_out):
        raise RuntimeError(
            f"self-distillation produced {len(items)} usable sequences in {seconds:.0f} s "
            "(need training and validation ones): raise --num-prompts or the time budget"
        )
    info = DatasetInfo(
        target=target_name,
        target_sha256=target_sha256,
        seed=config.seed,
        num_prompts=config.num_prompts,
        max_prompt_tokens=config.max_prompt_tokens,
        max_new_tokens=config.max_new_tokens,
        prompt_temperatures=config.prompt_temperatures,
        prompt_openers=config.prompt_openers,
        answer_temperatures=config.answer_temperatures,
        top_p=config.top_p,
        generation_seconds=round(seconds, 1),
        command=command,
    )
    return DistillDataset.from_sequences(
        [seq for _, seq, _, _ in items],
        [start for _, _, start, _ in items],
        held_out,
        [temperature for _, _, _, temperature in items],
        info,
    )
