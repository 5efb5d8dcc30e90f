"""A standalone draft model: any model the loaders read, with the target's tokenizer.

A smaller model of the same family (same tokenizer) guesses the target's next tokens
greedily; the verify keeps the output lossless. The draft model:

* is checked before any weight loads (``check_same_tokenizer``): both tokenizers must map
  the same token strings to the same ids, and its vocabulary must cover the tokenizer's;
  else ``TokenizerMismatch`` names both models and the first difference;
* keeps its own K/V, in a ``KVStorage`` over the target's page allocator: the same slots,
  hence the same paged KV budget and the same page table (a draft position's K/V lives at
  the slot the target's row maps it to, in the draft's storage);
* catches up lazily: per request it remembers which tokens its K/V holds at which slots,
  and at each proposal extends over what changed since (the whole prompt the first time;
  after an accept, the bonus token only, since the accepted drafts are its own), then
  drafts a chain of ``S`` tokens with ``S - 1`` one-token forwards.

The drafting forwards run eagerly (no device graph); the proposal is a chain whatever the
shape's top-K.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from eagle_hal.engine.request import Request
from eagle_hal.engine.runner import check_attention_features
from eagle_hal.errors import InvalidArgument
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.hal.sampling import TreeShape
from eagle_hal.model.errors import ModelLoadError
from eagle_hal.speculative.draft_tracker import table_row
from eagle_hal.speculative.drafter import Proposal
from eagle_hal.speculative.self_draft import chain_proposals

__all__ = [
    "DraftModelDrafter",
    "TokenizerMismatch",
    "check_same_tokenizer",
    "is_draft_model",
    "parse_draft_model",
]

_ROTARY_MARGIN = 64  # positions past the context the draft's rotary table covers


class TokenizerMismatch(ModelLoadError, ValueError):
    """A draft model's tokenizer is not its target's: its proposals would be other tokens."""


def is_draft_model(draft: Any) -> bool:
    """Whether a ``draft`` argument names a standalone draft model (``"model:PATH"``)."""
    return isinstance(draft, str) and draft.partition(":")[0].strip().lower() == "model"


def parse_draft_model(name: str, text: str) -> str:
    """``"model:PATH"`` -> ``PATH`` (a model directory, a GGUF file or a hub id, as the
    target takes). Raises ``InvalidArgument`` naming ``name`` when PATH is missing."""
    kind, colon, path = text.partition(":")
    if kind.strip().lower() != "model" or not colon or not path.strip():
        raise InvalidArgument(name, text, "'model:PATH' with PATH a model directory, a GGUF "
                                          "file or a hub id sharing the target's tokenizer")
    return path.strip()


def _vocabulary(path: Path) -> tuple[dict[str, int], int]:
    """The token -> id map of the tokenizer at a resolved model ``path`` and its config's
    vocabulary size, read without any weight."""
    from eagle_hal.model.loading import Tokenizer, read_target_config
    from eagle_hal.model.loading.gguf import gguf_reader

    config, _ = read_target_config(path)
    tokenizer = (Tokenizer.from_hf_dir(path) if path.is_dir()
                 else Tokenizer.from_gguf(gguf_reader(path), str(path)))
    return dict(tokenizer.backend.get_vocab(with_added_tokens=True)), config.vocab_size


def check_same_tokenizer(draft: str | Path, target: str | Path | None,
                         *, progress: bool = False) -> Path:
    """The resolved path of the draft model ``draft`` after checking that its tokenizer is
    ``target``'s (``None``: the default model): the same token strings at the same ids, and
    a vocabulary that covers them. Reads tokenizers and configs only; raises
    ``TokenizerMismatch``, or what the loaders raise for a missing or unreadable model."""
    from eagle_hal.model.hub import resolve_target
    from eagle_hal.model.loading import default_model_path

    draft_path = resolve_target(draft, progress=progress)
    target_path = default_model_path() if target is None else resolve_target(target,
                                                                               progress=progress)
    draft_tokens, draft_size = _vocabulary(draft_path)
    target_tokens, _ = _vocabulary(target_path)
    where = f"draft model {draft_path} and target {target_path}"
    if draft_tokens != target_tokens:
        by_id = {i: t for t, i in draft_tokens.items()}
        differ = sorted(i for t, i in target_tokens.items() if by_id.get(i) != t)
        differ += sorted(i for t, i in draft_tokens.items() if target_tokens.get(t) != i)
        first = min(differ) if differ else None
        detail = (f"token id {first}: {by_id.get(first)!r} in the draft, "
                  f"{ {i: t for t, i in target_tokens.items()}.get(first)!r} in the target"
                  if first is not None else "")
        raise TokenizerMismatch(
            f"{where} have different tokenizers ({len(draft_tokens)} and "
            f"{len(target_tokens)} tokens; {detail}); a draft model must share its "
            "target's tokenizer")
    if draft_size < len(target_tokens):
        raise TokenizerMismatch(
            f"{where}: the draft's vocabulary of {draft_size} rows does not cover the "
            f"tokenizer's {len(target_tokens)} tokens")
    return draft_path


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    return next(i for i in range(n) if a[i] != b[i])


class DraftModelDrafter:
    """The ``Drafter`` of a standalone draft ``model`` (see the module docstring): built
    on the target's device and dtype, bound to the runner (``bind``) before it drafts.
    ``name`` is what reports call it (``"model:PATH"``)."""

    on_device = True

    def __init__(self, model: Any, name: str = "model") -> None:
        self.model = model
        self.name = name
        self.topk = 1  # a chain
        self.runner: Any = None
        self.kv: Any = None
        self.attn: Any = None
        # per request: the tokens whose K/V the draft's storage holds, from position 0,
        # and the slots they were written at
        self._held: dict[int, tuple[list[int], list[int]]] = {}

    def bind(self, runner: Any) -> None:
        """Give the draft model its KV over ``runner``'s allocator and an attention backend
        over the runner's page table. Raises ``InvalidArgument`` for a draft on another
        device or with a smaller vocabulary than the target's logits need."""
        from eagle_hal.engine.kv_cache import KVStorage
        from eagle_hal.model.fusion import fuse_for_inference

        model = self.model
        if runner.parallel.world_size > 1:
            raise InvalidArgument("draft", self.name, "a single-process target (a draft "
                                  "model does not run tensor-parallel)")
        if model.device != runner.device:
            raise InvalidArgument("draft", self.name,
                                  f"a draft model on the target's device {runner.device}")
        config = model.config
        self.kv = KVStorage.for_allocator(
            runner.allocator, num_layers=config.num_layers, num_kv_heads=config.num_kv_heads,
            head_dim=config.head_dim, layout=runner.layout, dtype=model.dtype,
            device=runner.device,
        )
        self.attn = runner.backend.create_attention_backend(check_attention_features(
            runner.backend, model.attention_config(self.kv, runner.device_table.tensor),
            runner.table.max_context))
        fuse_for_inference(runner.backend.model_kernels(), model)
        model.rotary.prepare(model.dtype, runner.table.max_context + _ROTARY_MARGIN)
        self.vocab = min(config.vocab_size, runner.target.config.vocab_size)
        self.runner = runner

    def _forward(self, batch: Any, last: torch.Tensor | None = None) -> torch.Tensor:
        """The draft's greedy next token ``[B]`` after each request's last token of
        ``batch`` (rows ``last`` of its hidden states; every row when ``None``)."""
        batch.attn_metadata = self.attn.plan(batch)
        hidden = self.model.forward(batch, self.attn).hidden_states
        if last is not None:
            hidden = hidden[last]
        return self.model.compute_logits(hidden)[:, : self.vocab].argmax(dim=-1)

    def propose_requests(self, requests: Sequence[Request], shape: TreeShape) -> list[Proposal]:
        steps = min(shape.num_steps, shape.num_draft_tokens - 1)
        if steps <= 0 or not requests:
            return [Proposal() for _ in requests]
        runner, table = self.runner, self.runner.table
        rows = [table_row(r) for r in requests]
        seq_lens = [r.cached_len for r in requests]
        for row, seq_len in zip(rows, seq_lens, strict=True):
            table.reserve(row, seq_len + steps)  # the verify's slots of the same positions
        runner.sync_table()
        # 1. extend each request over what its draft K/V lacks, the pending root included
        starts, ids, positions, slots, ends = [], [], [], [], []
        for request, row, seq_len in zip(requests, rows, seq_lens, strict=True):
            tokens, held_slots = self._held.get(request.request_id, ([], []))
            row_slots = table.slots(row, 0, seq_len + 1)
            valid = min(_common_prefix(tokens, request.all_ids[:seq_len]),
                        _common_prefix(held_slots, row_slots))
            starts.append(valid)
            ids += request.all_ids[valid:seq_len + 1]
            positions += range(valid, seq_len + 1)
            slots += row_slots[valid:]
            ends.append(len(ids) - 1)
        extends = [s + 1 - v for s, v in zip(seq_lens, starts, strict=True)]
        ids_d, positions_d, slots_d, ends_d = runner.upload(ids, positions, slots, ends)
        batch = runner.make_batch(ForwardMode.EXTEND, input_ids=ids_d, positions=positions_d,
                                  table_rows=rows, prefix_lens=starts, extend_lens=extends,
                                  out_cache_loc=slots_d)
        token = self._forward(batch, ends_d)  # [B] the first drafted token
        drafted = [token]
        # 2. the chain: each drafted token at the next position
        for depth in range(1, steps):
            batch = runner.causal_batch(ForwardMode.DECODE, token, rows,
                                        [s + depth for s in seq_lens], [1] * len(requests))
            token = self._forward(batch)
            drafted.append(token)
        chains = torch.stack(drafted, dim=1).tolist()  # [B, S], one read-back
        for request, row, seq_len, chain in zip(requests, rows, seq_lens, chains, strict=True):
            self._held[request.request_id] = (
                request.all_ids[:seq_len + 1] + chain[:steps - 1],
                table.slots(row, 0, seq_len + steps),
            )
        return chain_proposals(chains)

    def propose(self, request_ids: Sequence[int], tokens: Sequence[Sequence[int]],
                shape: TreeShape) -> list[Proposal]:
        raise TypeError("DraftModelDrafter proposes through propose_requests (it keeps KV)")

    def observe(self, request_id: int, emitted: Sequence[int]) -> None:
        pass  # the next proposal compares the request's tokens with what the K/V holds

    def release(self, request_id: int) -> None:
        self._held.pop(request_id, None)
