"""The target's logprobs of the tokens an iteration emitted (``SamplingParams.logprobs``).

Each emitted token was sampled at one verify node: the accepted path's node before it
(token j of a request at ``accepted_nodes[j]``; the bonus at the last accepted node). Its
logprobs are read from that node's row, so a speculative iteration reports exactly what
plain decoding reports for the same tokens:

* ``"processed"``: the log of the distribution sampled (the log-softmax of the processed,
  temperature-scaled logits over the tokens the cuts keep), after the logit bias and penalties
  (``speculative.logits_processing``) and ``SamplingOps.target_probs``' temperature,
  top-k, top-p and min-p. A greedy request samples a one-hot, which says nothing; its
  logprobs are those of the processed logits at temperature 1, with the same cuts;
* ``"raw"``: the log-softmax of the model's logits, nothing applied.

It runs only for batches with a request that asks (the worker's eager path) and reads the
rows back to the host once.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from eagle_hal.engine.request import Request, TokenLogprobs
from eagle_hal.hal.sampling import AcceptResult, SamplingOps
from eagle_hal.speculative.acceptance import SamplingBatch

__all__ = ["emitted_logprobs", "wanted"]


def wanted(requests: Sequence[Request]) -> bool:
    return any(r.params.logprobs is not None for r in requests)


def emitted_logprobs(
    ops: SamplingOps,
    sampling: SamplingBatch,
    raw_logits: torch.Tensor,
    processed_logits: torch.Tensor,
    vocab_size: int,
    requests: Sequence[Request],
    tokens: torch.Tensor,
    result: AcceptResult,
) -> list[list[TokenLogprobs]]:
    """Per request, the logprobs of each token it emitted (``[]`` for one that asked for
    none). ``raw_logits``/``processed_logits`` ``[B, N, V_padded]`` the target's logits
    before and after the logits stage, ``tokens`` ``[B, N]`` the verify tree's,
    ``result`` the accept's."""
    batch = tokens.shape[0]
    device = tokens.device
    nodes = result.accepted_nodes.long().clamp(min=0)  # [B, W] the node each token came from
    emitted = ops.fill_bonus_tokens(tokens, result.accepted_nodes, result.accept_lens,
                                    result.bonus_tokens).long().clamp(min=0)  # [B, W]
    rows = torch.arange(batch, device=device)[:, None]
    modes = [r.params.logprobs_mode for r in requests]
    logprobs = None
    if "processed" in modes:
        temperatures = torch.where(sampling.temperatures > 0, sampling.temperatures, 1.0)
        picked = processed_logits[rows, nodes]  # [B, W, V_padded]
        probs = sampling.target_probs(ops, picked, vocab_size,
                                      temperatures)[..., :vocab_size]  # [B, W, V]
        # The log-softmax of the scaled logits over the tokens the cuts keep, rather than
        # the log of float32 probabilities: a kept token whose probability underflows
        # keeps its finite logprob. The kept set is read from the probabilities where a
        # request cuts at all (a token cut has probability exactly 0).
        scaled = picked[..., :vocab_size].float() / temperatures.view(-1, 1, 1)
        cuts = (sampling.top_ks > 0) | (sampling.top_ps < 1)
        if sampling.min_ps is not None:
            cuts = cuts | (sampling.min_ps > 0)
        logprobs = torch.log_softmax(
            scaled.masked_fill((probs == 0) & cuts.view(-1, 1, 1), -math.inf), dim=-1)
    if "raw" in modes:
        raw = torch.log_softmax(raw_logits[rows, nodes][..., :vocab_size].float(), dim=-1)
        if logprobs is None:
            logprobs = raw
        else:
            is_raw = torch.tensor([m == "raw" for m in modes], device=device).view(-1, 1, 1)
            logprobs = torch.where(is_raw, raw, logprobs)
    assert logprobs is not None
    sampled = logprobs.gather(2, emitted[:, :, None]).squeeze(2).tolist()  # [B, W]
    top_k = max((r.params.logprobs or 0) for r in requests)
    top_values: list = [[[]] * nodes.shape[1]] * batch
    top_ids: list = top_values
    if top_k > 0:
        top = torch.topk(logprobs, min(top_k, vocab_size), dim=-1)  # sorted, most likely first
        top_values, top_ids = top.values.tolist(), top.indices.tolist()
    lengths = result.accept_lens.tolist()
    out: list[list[TokenLogprobs]] = []
    for b, request in enumerate(requests):
        count = request.params.logprobs
        if count is None:
            out.append([])
            continue
        out.append([
            TokenLogprobs(sampled[b][j], tuple(
                (token, value)
                for token, value in zip(top_ids[b][j][:count], top_values[b][j][:count],
                                        strict=True)
                if value != -math.inf
            ))
            for j in range(lengths[b])
        ])
    return out
