"""The logits stage before temperature: logit bias, then the repetition, frequency and
presence penalties, per verify node.

Plain decoding processes the logits of the next position from the tokens before it. A
verify tree holds many positions at once, and the tokens before a node are the prefix
(prompt and output, the root included) *and the drafted tokens on the path from the root
to that node*: each node's penalties count those, so that the target distribution of
every node is exactly the one plain decoding would sample from had it emitted that path.
Applying the prefix's counts to every node would not be lossless: a token drafted at depth
1 is penalised at depth 2 in plain decoding.

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

__all__ = ["LogitsProcessing", "path_token_counts"]


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
        seen = torch.stack([never if s.seen_in_prompt is None else s.seen_in_prompt
                            for s in states])  # [B, V]
        counts = counts[:, None, :].expand(batch, nodes, vocab)
        if nodes > 1:
            assert tokens is not None and retrieve_next_token is not None
            assert retrieve_next_sibling is not None
            counts = counts + path_token_counts(tokens, retrieve_next_token,
                                                retrieve_next_sibling, vocab)
        present = counts > 0
        seen = seen[:, None, :] | present
        params = [r.params for r in requests]
        repetition, frequency, presence = (
            torch.tensor([getattr(p, name) for p in params], dtype=torch.float32,
                         device=self.device).view(batch, 1, 1)
            for name in ("repetition_penalty", "frequency_penalty", "presence_penalty")
        )
        penalised = torch.where(rows > 0, rows / repetition, rows * repetition)
        rows.copy_(torch.where(seen, penalised, rows))
        rows -= frequency * counts
        rows -= presence * present
        return out

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


def path_token_counts(
    tokens: torch.Tensor,
    retrieve_next_token: torch.Tensor,
    retrieve_next_sibling: torch.Tensor,
    vocab_size: int,
) -> torch.Tensor:
    """How often each token occurs among the drafted tokens from the root (excluded: it is
    in the prefix already) down to each node (included), float32 ``[B, N, V]``, from a
    verify tree's ``tokens`` and links ``[B, N]``."""
    batch, nodes = tokens.shape
    device = tokens.device
    parents = parents_from_links(retrieve_next_token, retrieve_next_sibling)  # [B, N]
    node = torch.arange(nodes, device=device)
    on_path = torch.zeros(batch, nodes, nodes, dtype=torch.bool, device=device)
    current = node.expand(batch, nodes).contiguous()
    for _ in range(nodes - 1):  # a path has at most N - 1 drafts; the walk ends at the root
        on_path.scatter_(2, current[:, :, None], True)
        current = parents.gather(1, current)
    on_path[:, :, 0] = False  # the root's token is counted with the prefix
    counts = torch.zeros(batch, nodes, vocab_size, device=device)
    ids = tokens.long().clamp(0, vocab_size - 1)[:, None, :].expand(batch, nodes, nodes)
    return counts.scatter_add_(2, ids, on_path.float())
