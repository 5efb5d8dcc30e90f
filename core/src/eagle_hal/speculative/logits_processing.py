"""The logits stage before temperature: logit bias, then the repetition, frequency and
presence penalties, per verify node.

Plain decoding processes the logits of the next position from the tokens before it. A
verify tree holds many positions at once, and the tokens before a node are the prefix
(prompt and output, the root included) *and the drafted tokens on the path from the root
to that node*: each node's penalties count those, so that the target distribution of
every node is exactly the one plain decoding would sample from had it emitted that path.
Applying the prefix's counts to every node would not be lossless: a token drafted at depth
1 is penalised at depth 2 in plain decoding.

A node's counts differ from the prefix's only at the (at most D, the tree's depth) tokens
on its path. So the prefix's penalties are applied to every node at once, in place, from
``[B, V]`` operands; then the path tokens' entries are recomputed from their logits before
the penalties, ``[B, N, D]`` gathers and one scatter. Besides its output the stage holds no
batch x nodes x vocabulary array: that would be gigabytes for a large batch, tree and
vocabulary.

The order is vLLM's: ``logit_bias`` is added; then, for a token seen in the prompt or the
output (path included) a positive logit is divided by ``repetition_penalty`` and a
negative one multiplied by it; then ``frequency_penalty`` times the token's count in the
output (path included) and ``presence_penalty`` once it is there are subtracted. Requests
without a parameter get its neutral value (bias 0, penalty 1 or 0), which leaves their
logits bit for bit as they were, so one batch mixes both. Temperature, top-k, top-p and
min-p follow in ``SamplingOps.target_probs``.

Only torch operations, so every backend runs it on its device. The worker runs it only for
batches with a request that asks for a bias or a penalty (``SamplingParams.processes_logits``);
the per-request counts live on the device and grow by the tokens each request emitted
since its last batch (``prompt and output ids`` are uploaded once, then only new tokens).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request
from eagle_hal.errors import InvalidArgument
from eagle_hal.ops.reference_verify import parents_from_links

__all__ = ["LogitsProcessing", "tree_paths"]


@dataclasses.dataclass(slots=True)
class _RequestState:
    """One request's device state: its bias row, prompt-seen mask and output counts."""

    bias: torch.Tensor | None  # [V] float32
    seen_in_prompt: torch.Tensor | None  # [V] bool
    counts: torch.Tensor | None  # [V] float32 output token counts
    counted: int = 0  # output ids in ``counts``


class LogitsProcessing:
    """The stage for one engine's vocabulary on one device (see the module docstring)."""

    def __init__(self, vocab_size: int, device: torch.device | str) -> None:
        self.vocab_size = vocab_size
        self.device = torch.device(device)
        self._states: dict[int, _RequestState] = {}

    @staticmethod
    def needed(requests: Sequence[Request]) -> bool:
        return any(r.params.processes_logits for r in requests)

    def forget(self, request: Request) -> None:
        self._states.pop(request.request_id, None)

    def apply(
        self,
        logits: torch.Tensor,
        requests: Sequence[Request],
        tokens: torch.Tensor | None = None,
        retrieve_next_token: torch.Tensor | None = None,
        retrieve_next_sibling: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """The processed logits, float32 ``[B, N, V_padded]`` from the target's ``logits``
        of that shape, one row per verify node; ``tokens``/``retrieve_*`` ``[B, N]`` the
        verify tree (``None``: one node per request, the next position of the prefix).
        Entries past the vocabulary are left as they are."""
        batch, nodes, _ = logits.shape
        vocab = self.vocab_size
        states = [self._state(r) for r in requests]
        out = logits.float().clone()
        rows = out[..., :vocab]  # a view: processed in place
        if any(s.bias is not None for s in states):
            zero = torch.zeros(vocab, device=self.device)
            rows += torch.stack([zero if s.bias is None else s.bias for s in states])[:, None]
        if not any(r.params.uses_penalties for r in requests):
            return out
        zero = torch.zeros(vocab, device=self.device)
        counts = torch.stack([zero if s.counts is None else s.counts for s in states])  # [B, V]
        never = torch.zeros(vocab, dtype=torch.bool, device=self.device)
        present = counts > 0
        seen = present | torch.stack([never if s.seen_in_prompt is None else s.seen_in_prompt
                                      for s in states])  # [B, V]
        params = [r.params for r in requests]
        repetition, frequency, presence = (
            torch.tensor([getattr(p, name) for p in params], dtype=torch.float32,
                         device=self.device).view(batch, 1)
            for name in ("repetition_penalty", "frequency_penalty", "presence_penalty")
        )
        paths = None
        if nodes > 1:
            assert tokens is not None and retrieve_next_token is not None
            assert retrieve_next_sibling is not None
            paths = tree_paths(tokens, retrieve_next_token, retrieve_next_sibling, vocab)
            # the path tokens' logits before any penalty: they are recomputed below
            before = rows.gather(2, paths[0])  # [B, N, D]
        # The prefix's penalties, the same for every node: [B, V] operands broadcast over the
        # nodes, in place. The repetition penalty's sign test needs a [N, V] temporary, so it
        # runs per request that sets it rather than over the whole batch at once.
        for b, p in enumerate(params):
            if p.repetition_penalty != 1.0:
                row, mask = rows[b], seen[b]
                penalised = torch.where(row > 0, row / p.repetition_penalty,
                                        row * p.repetition_penalty)
                row.copy_(torch.where(mask, penalised, row))
        rows -= (frequency * counts)[:, None, :]
        rows -= (presence * present)[:, None, :]
        if paths is not None:
            self._correct_path_tokens(rows, before, paths, counts, repetition, frequency,
                                      presence)
        return out

    @staticmethod
    def _correct_path_tokens(
        rows: torch.Tensor,
        before: torch.Tensor,
        paths: tuple[torch.Tensor, torch.Tensor],
        counts: torch.Tensor,
        repetition: torch.Tensor,
        frequency: torch.Tensor,
        presence: torch.Tensor,
    ) -> None:
        """Overwrite, in ``rows [B, N, V]``, the logits of the tokens on each node's path
        (at most D per node) with their penalties counted over prefix and path: the only
        entries of a node whose counts differ from the prefix's."""
        ids, valid = paths  # [B, N, D]
        same = (ids[..., :, None] == ids[..., None, :]) & valid[..., None, :]  # [B, N, D, D]
        total = counts.gather(1, ids.flatten(1)).view_as(ids) + same.sum(-1)
        scale = repetition[:, :, None]
        value = torch.where(before > 0, before / scale, before * scale)  # seen: on the path
        value = value - frequency[:, :, None] * total
        value = value - presence[:, :, None]
        # Slot 0 is the node itself, valid on every node but the root; the root's entry
        # keeps the prefix's value. Unused slots repeat slot 0, so that duplicate indices
        # of one scatter always write the same value.
        first = torch.where(valid[..., :1], value[..., :1], rows.gather(2, ids[..., :1]))
        value = torch.where(valid, value, first)
        rows.scatter_(2, torch.where(valid, ids, ids[..., :1]), value)

    def _state(self, request: Request) -> _RequestState:
        """The request's state, its counts grown by the output ids it emitted since."""
        state = self._states.get(request.request_id)
        params = request.params
        if state is None:
            state = _RequestState(self._bias_row(request), None, None)
            if params.uses_penalties:
                state.seen_in_prompt = torch.zeros(self.vocab_size, dtype=torch.bool,
                                                   device=self.device)
                state.seen_in_prompt[self._ids(request.prompt_ids)] = True
                state.counts = torch.zeros(self.vocab_size, device=self.device)
            self._states[request.request_id] = state
        if state.counts is not None and state.counted < len(request.output_ids):
            new = self._ids(request.output_ids[state.counted :])
            state.counts.index_add_(0, new, torch.ones(len(new), device=self.device))
            state.counted = len(request.output_ids)
        return state

    def _ids(self, ids: Sequence[int]) -> torch.Tensor:
        return torch.tensor(list(ids), dtype=torch.int64).clamp_(0, self.vocab_size - 1).to(
            self.device)

    def _bias_row(self, request: Request) -> torch.Tensor | None:
        bias = request.params.logit_bias
        if not bias:
            return None
        for token in bias:
            if token >= self.vocab_size:
                raise InvalidArgument("logit_bias", token,
                                      f"token ids below the vocabulary size {self.vocab_size}")
        row = torch.zeros(self.vocab_size)
        row[list(bias)] = torch.tensor(list(bias.values()), dtype=torch.float32)
        return row.to(self.device)


def tree_paths(
    tokens: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    vocab_size: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The drafted tokens from each node (included) up to the root (excluded: its token is
    in the prefix already) of a verify tree, from its ``tokens`` and links ``[B, N]``: ids
    ``[B, N, D]`` (clamped into the vocabulary) and which of them are on the path, D the
    tree's depth (at least 1)."""
    batch, nodes = tokens.shape
    parents = parents_from_links(retrieve_next_token, retrieve_next_sibling)  # [B, N]
    node = torch.arange(nodes, device=tokens.device).expand(batch, nodes)
    # depth by pointer jumping (log2 N gathers), so that the walk below takes D steps
    depth, up = (node != 0).long(), parents
    reach = 1
    while reach < nodes:
        depth = depth + depth.gather(1, up)
        up = up.gather(1, up)
        reach *= 2
    steps = max(int(depth.max()), 1)
    ids = tokens.long().clamp(0, vocab_size - 1)
    current, out_ids, out_valid = node, [], []
    for _ in range(steps):
        out_ids.append(ids.gather(1, current))
        out_valid.append(current != 0)
        current = parents.gather(1, current)
    return torch.stack(out_ids, -1), torch.stack(out_valid, -1)
