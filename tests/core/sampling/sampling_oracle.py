"""An independent float64 model of the sampling law: HF transformers' logits on the tiny
target's weights, then logit bias, penalties, temperature, top-k, top-p and min-p written
out token by token, and the exact joint law of the first tokens by enumeration."""

from __future__ import annotations

import math

import torch
from eagle_hal.testing.models import hf_float64_copy

transformers = __import__("pytest").importorskip("transformers")


hf_copy = hf_float64_copy  # the float64 transformers oracle


def processed_logits(row: list[float], prompt: list[int], output: list[int], params) -> list[float]:
    """Logit bias, then repetition (prompt and output), frequency and presence (output)."""
    logits = list(row)
    for token, bias in (params.logit_bias or {}).items():
        logits[token] += bias
    seen = set(prompt) | set(output)
    for token in range(len(logits)):
        count = output.count(token)
        if token in seen:
            value = logits[token]
            rp = params.repetition_penalty
            logits[token] = value / rp if value > 0 else value * rp
        logits[token] -= params.frequency_penalty * count
        if count:
            logits[token] -= params.presence_penalty
    return logits


def law(logits: list[float], params, temperature: float | None = None) -> tuple[list[float], float]:
    """The sampled distribution from processed ``logits``, and the smallest gap between a
    kept/dropped decision and its threshold (a float32 sampler may differ within it)."""
    temperature = params.temperature if temperature is None else temperature
    if temperature == 0:
        best = max(range(len(logits)), key=lambda t: (logits[t], -t))
        return [1.0 if t == best else 0.0 for t in range(len(logits))], math.inf
    top = max(logits)
    weights = [math.exp((v - top) / temperature) for v in logits]
    total = sum(weights)
    probs = [w / total for w in weights]
    order = sorted(range(len(probs)), key=lambda t: (-probs[t], t))
    if params.top_k > 0:
        order = order[: params.top_k]
    kept_mass = sum(probs[t] for t in order)
    kept, before, margin = [], 0.0, math.inf
    for token in order:  # top-p: keep a token while the mass before it is short of top_p
        if params.top_p < 1.0:
            margin = min(margin, abs(before / kept_mass - params.top_p))
        if params.top_p < 1.0 and before / kept_mass >= params.top_p and kept:
            break  # (at top_p 1 nothing is cut, however close to 1 the rounded mass gets)
        kept.append(token)
        before += probs[token]
    if params.min_p > 0:
        threshold = params.min_p * probs[kept[0]]
        margin = min(margin, *(abs(probs[t] - threshold) / probs[kept[0]] for t in kept))
        kept = [t for t in kept if probs[t] >= threshold]
    mass = sum(probs[t] for t in kept)
    return [probs[t] / mass if t in kept else 0.0 for t in range(len(probs))], margin


def joint_law(hf, prompt: list[int], params, length: int) -> dict[tuple[int, ...], float]:
    """P(first ``length`` output tokens), every sequence enumerated."""
    result = {(): 1.0}
    for _ in range(length):
        prefixes = [p for p, q in result.items() if q > 0]
        with torch.no_grad():
            last = hf(torch.tensor([prompt + list(p) for p in prefixes])).logits[:, -1, :]
        grown = {}
        for prefix, row in zip(prefixes, last.tolist(), strict=True):
            dist, margin = law(processed_logits(row, prompt, list(prefix), params), params)
            assert margin > 1e-5, f"a cut too close to call in float32 (margin {margin:.1e})"
            for token, p in enumerate(dist):
                if p > 0:
                    grown[prefix + (token,)] = result[prefix] * p
        result = grown
    return result


def chi_square_p_value(counts: dict, probs: dict, n: int) -> float:
    """Pearson's chi-square of ``counts`` (n samples) against ``probs``; cells expected
    below 5 are pooled. A sample outside the support fails at once (p = 0)."""
    if any(cell not in probs for cell in counts):
        return 0.0
    observed, expected = [], []
    pool_o = pool_e = 0.0
    for cell in sorted(probs, key=lambda k: probs[k], reverse=True):
        e = probs[cell] * n
        if e >= 5:
            observed.append(counts.get(cell, 0))
            expected.append(e)
        else:
            pool_o += counts.get(cell, 0)
            pool_e += e
    if pool_e > 0:
        observed.append(pool_o)
        expected.append(pool_e)
    o = torch.tensor(observed, dtype=torch.float64)
    e = torch.tensor(expected, dtype=torch.float64)
    statistic = ((o - e) ** 2 / e).sum()
    dof = len(observed) - 1
    return torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                   statistic / 2).item()
