"""How close plain decoding comes to the memory bandwidth of the device it runs on.

A decode step at small batch reads every weight once and every request's K/V, and computes
little: its time is bounded below by those bytes over the memory bandwidth. The fraction
reached is (bytes per step) / (step time) / (bandwidth), where

* the bytes are every weight a step reads (all layers, the final norm and the ``lm_head``;
  of the embedding table only the batch's rows, one per request) plus the K/V bytes of
  every request's context, averaged over the run's steps (``step_bytes``);
* the step time is the timed runs' decode time per step (``engine.step_ledger``);
* the bandwidth is a device-to-device copy of at least 1 GiB measured in the same run
  (``copy_bandwidth``; bytes read plus bytes written, as a copy moves both), and, where
  known, the device's nominal peak.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import torch

from eagle_hal.engine.step_ledger import batch_bucket

__all__ = ["copy_bandwidth", "decode_bandwidth", "kv_bytes_per_token", "step_bytes",
           "weight_bytes"]


def weight_bytes(config: Any, element_size: int, batch_size: int = 1) -> int:
    """The weight bytes one decode step over ``batch_size`` requests reads: every layer,
    the final norm, the ``lm_head`` (the tied embedding table where tied), and one
    embedding row per request."""
    parameters = config.num_parameters  # a tied lm_head counted once
    table = config.vocab_size * config.hidden_size
    untied_embedding = 0 if config.tie_word_embeddings else table
    return element_size * (parameters - untied_embedding + batch_size * config.hidden_size)


def kv_bytes_per_token(config: Any, element_size: int) -> int:
    """The K and V bytes of one cached token over every layer."""
    return 2 * config.num_layers * config.num_kv_heads * config.head_dim * element_size


def step_bytes(config: Any, element_size: int, context_lens: Sequence[float]) -> float:
    """The bytes of one decode step over requests whose attention reads ``context_lens``
    cached tokens each."""
    return (weight_bytes(config, element_size, len(context_lens))
            + kv_bytes_per_token(config, element_size) * float(sum(context_lens)))


def copy_bandwidth(backend: Any, num_bytes: int = 1 << 30, trials: int = 5,
                   copies: int = 10) -> float:
    """Bytes per second a device-to-device copy of ``num_bytes`` moves (read plus
    written), the best of ``trials`` runs of ``copies`` copies between device syncs."""
    device = backend.torch_device
    source = torch.empty(num_bytes, dtype=torch.uint8, device=device)
    source.fill_(1)
    target = torch.empty_like(source)
    target.copy_(source)  # the first copy pays any lazy allocation
    best = 0.0
    for _ in range(trials):
        backend.synchronize()
        start = time.perf_counter()
        for _ in range(copies):
            target.copy_(source)
        backend.synchronize()
        seconds = time.perf_counter() - start
        best = max(best, 2 * num_bytes * copies / max(seconds, 1e-12))
    del source, target
    return best


def decode_bandwidth(row: dict[str, Any], config: Any, element_size: int,
                     prompt_lens: Sequence[int], max_tokens: int, copy: float,
                     peak: float | None) -> dict[str, Any] | None:
    """The bandwidth figures of a plain decoding ``row`` of ``eagle-hal bench`` (``None``
    where its ledger has no decode step at its batch size): bytes per step averaged over
    the run (each request's context grows from its prompt by one token a step: on average
    its prompt plus half its output), its decode time per step, the bytes per second
    reached and their fractions of ``copy`` and, where given, ``peak`` (bytes/s)."""
    decode = row.get("time_by_batch", {}).get("decode", {})
    account = decode.get(str(batch_bucket(row["batch_size"])))
    if not account or not account["steps"]:
        return None
    seconds = account["seconds"] / account["steps"]
    batch = row["batch_size"]
    lens = [prompt_lens[i % len(prompt_lens)] + max_tokens / 2 for i in range(batch)]
    moved = step_bytes(config, element_size, lens)
    rate = moved / seconds
    out: dict[str, Any] = {
        "bytes_per_step": moved,
        "weight_bytes_per_step": weight_bytes(config, element_size, batch),
        "kv_bytes_per_step": moved - weight_bytes(config, element_size, batch),
        "step_ms": 1e3 * seconds, "bytes_per_s": rate,
        "copy_bytes_per_s": copy, "fraction_of_copy": rate / copy if copy else None,
        "peak_bytes_per_s": peak, "fraction_of_peak": rate / peak if peak else None,
    }
    if not peak:
        out["note"] = "no nominal peak: the backend does not know it and none was given"
    return out
