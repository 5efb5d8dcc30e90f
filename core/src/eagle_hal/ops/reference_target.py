"""Pure-torch target-side ops: masked argmax, sampling distributions, and noise.

The seeded noise is a counter-based hash computed with 32-bit integer arithmetic held in
int64 (products split in 16-bit halves so nothing overflows), so it is identical on every
device and independent of which other requests share the batch.
"""

from __future__ import annotations

import torch

from eagle_hal.hal.sampling import ACCEPT_DRAW_LIMIT, SamplingNoise, TreeConfigError
from eagle_hal.ops.reference_checks import check_vocab

__all__ = ["masked_argmax", "sampling_noise", "target_probs"]

_MASK32 = 0xFFFFFFFF
_DRAW_STREAM_HIGH, _DRAW_STREAM_LOW = 0x1B873593, 0x2545F491


def masked_argmax(logits: torch.Tensor, vocab_size: int) -> torch.Tensor:
    check_vocab(logits, vocab_size)
    return torch.argmax(logits[..., :vocab_size], dim=-1)


def target_probs(
    logits: torch.Tensor,
    vocab_size: int,
    temperatures: torch.Tensor,
    top_ks: torch.Tensor,
    top_ps: torch.Tensor,
    min_ps: torch.Tensor | None = None,
) -> torch.Tensor:
    check_vocab(logits, vocab_size)
    batch_size, padded_vocab = logits.shape[0], logits.shape[-1]
    checked = [("temperatures", temperatures), ("top_ks", top_ks), ("top_ps", top_ps)]
    if min_ps is not None:
        checked.append(("min_ps", min_ps))
    for name, values in checked:
        if tuple(values.shape) != (batch_size,):
            raise TreeConfigError(f"{name} must be [B] = [{batch_size}], got {tuple(values.shape)}")
    rows = logits.reshape(batch_size, -1, padded_vocab)[..., :vocab_size].float()  # [B, R, V]

    def per_request(values: torch.Tensor) -> torch.Tensor:
        return values.view(batch_size, 1, 1)

    greedy = per_request(temperatures <= 0)
    scaled = rows / per_request(torch.where(temperatures > 0, temperatures, 1.0).float())
    sorted_probs, order = torch.sort(torch.softmax(scaled, dim=-1), dim=-1, descending=True,
                                     stable=True)
    rank = torch.arange(vocab_size, device=logits.device)
    top_k = torch.where((top_ks <= 0) | (top_ks > vocab_size), vocab_size, top_ks.long())
    kept = sorted_probs * (rank < per_request(top_k))
    # Top-p over the top-k distribution: keep a token while the mass before it is short.
    mass_before = torch.cumsum(kept, dim=-1) - kept
    total = kept.sum(dim=-1, keepdim=True)
    within_top_p = (mass_before < per_request(top_ps.float()) * total) | (rank == 0)
    kept = torch.where(within_top_p, kept, 0.0)
    if min_ps is not None:
        # min-p: drop what is less likely than min_p times the most likely token (the
        # first of the sorted row, never cut), a ratio no renormalisation changes
        kept = torch.where(kept >= per_request(min_ps.float()) * kept[..., :1], kept, 0.0)
    kept = kept / kept.sum(dim=-1, keepdim=True)
    probs = torch.zeros_like(kept).scatter_(-1, order, kept)

    one_hot = torch.zeros_like(probs).scatter_(-1, rows.argmax(dim=-1, keepdim=True), 1.0)
    probs = torch.where(greedy, one_hot, probs)
    padded = torch.zeros(*probs.shape[:-1], padded_vocab, device=logits.device)
    padded[..., :vocab_size] = probs
    return padded.reshape(logits.shape)


def sampling_noise(
    batch_size: int,
    num_nodes: int,
    *,
    device: torch.device | str,
    generator: torch.Generator | None = None,
    seeds: torch.Tensor | None = None,
    counter: int | torch.Tensor = 0,
) -> SamplingNoise:
    if seeds is None:
        draws = torch.randint(0, ACCEPT_DRAW_LIMIT, (batch_size, num_nodes + 1),
                              generator=generator, device=device)
        return SamplingNoise(draws[:, :num_nodes], draws[:, num_nodes])
    if tuple(seeds.shape) != (batch_size,):
        raise TreeConfigError(f"seeds must be [B] = [{batch_size}], got {tuple(seeds.shape)}")
    key = _request_key(seeds.to(device).long(), counter)  # [B]
    index = torch.arange(num_nodes + 1, device=device)  # the nodes' coins, then the bonus
    high = _hash(key, _DRAW_STREAM_HIGH, index) & 0x3FFFFFFF
    draws = (high << 32) | _hash(key, _DRAW_STREAM_LOW, index)  # [B, N + 1] 62 random bits
    return SamplingNoise(draws[:, :num_nodes], draws[:, num_nodes])


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """``(x * constant) mod 2**32`` for x in [0, 2**32), without int64 overflow."""
    low = (x & 0xFFFF) * constant
    high = ((x >> 16) * (constant & 0xFFFF)) << 16
    return (low + high) & _MASK32


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit avalanche mix (the MurmurHash3 finalizer)."""
    x = x ^ (x >> 16)
    x = _mul32(x, 0x85EBCA6B)
    x = x ^ (x >> 13)
    x = _mul32(x, 0xC2B2AE35)
    return x ^ (x >> 16)


def _request_key(seeds: torch.Tensor, counter: int | torch.Tensor) -> torch.Tensor:
    if isinstance(counter, torch.Tensor):
        counter = counter.to(seeds.device).long()
    key = _mix32(seeds & _MASK32)
    key = _mix32(key ^ ((seeds >> 32) & _MASK32))
    return _mix32(key ^ (torch.as_tensor(counter, device=seeds.device).long() & _MASK32))


def _hash(key: torch.Tensor, stream: int, index: torch.Tensor) -> torch.Tensor:
    """32 random bits per (request key, stream, index): ``[B, len(index)]``."""
    lane = _mix32(key ^ stream).unsqueeze(1)
    return _mix32(_mix32(lane ^ index.long().unsqueeze(0)) ^ 0x9E3779B9)
