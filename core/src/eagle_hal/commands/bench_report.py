"""``eagle-hal bench``'s report: agreement with plain decoding, the Hugging Face baseline,
``results.json`` and the plots."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["hf_baseline", "match_with_plain", "write_results"]


def match_with_plain(
    outputs: Sequence[Sequence[int]], plain: Sequence[Sequence[int]]
) -> dict[str, float]:
    """How far speculative outputs agree with plain decoding of the same prompts:
    ``identical_outputs`` (fraction of prompts equal token for token) and
    ``prefix_tokens`` (fraction of plain's tokens matched before the first divergence). In
    float32 both are 1.0; in bf16 a different batch shape can flip a near-tie in the
    target's logits, after which the two continuations differ, correctly, from there on."""
    identical = sum(list(a) == list(b) for a, b in zip(outputs, plain, strict=True))
    matched = total = 0
    for a, b in zip(outputs, plain, strict=True):
        common = 0
        for x, y in zip(a, b, strict=False):
            if x != y:
                break
            common += 1
        matched += common
        total += len(b)
    return {
        "identical_outputs": identical / max(1, len(plain)),
        "prefix_tokens": matched / max(1, total),
    }


def hf_baseline(target: Any, prompts: Sequence[list[int]], max_new_tokens: int) -> dict[str, Any]:
    """Greedy ``generate`` of Hugging Face transformers' Llama holding the target's weights
    (parameter names are HF's), one prompt at a time."""
    import torch
    import transformers

    c = target.config
    hf_config = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_layers, num_attention_heads=c.num_heads,
        num_key_value_heads=c.num_kv_heads, head_dim=c.head_dim, rms_norm_eps=c.rms_norm_eps,
        rope_theta=c.rope_theta, tie_word_embeddings=c.tie_word_embeddings,
        max_position_embeddings=c.max_position_embeddings,
    )
    model = transformers.LlamaForCausalLM(hf_config).to(device=target.device, dtype=target.dtype)
    model.load_state_dict(target.state_dict(), strict=False)
    model.eval()
    tokens, seconds = 0, 0.0
    with torch.inference_mode():
        for ids in prompts:
            input_ids = torch.tensor([ids], device=target.device)
            start = time.perf_counter()
            out = model.generate(input_ids, max_new_tokens=max_new_tokens, do_sample=False,
                                 min_new_tokens=max_new_tokens, pad_token_id=0)
            seconds += time.perf_counter() - start
            tokens += out.shape[1] - len(ids)
    return {"tokens_per_s": tokens / seconds if seconds else 0.0, "output_tokens": tokens,
            "seconds": seconds, "batch_size": 1}


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def write_results(out: Path, report: dict[str, Any]) -> list[Path]:
    """``results.json`` plus PNG plots (when matplotlib imports) under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "results.json"]
    written[0].write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _progress('matplotlib is not importable: no plots (pip install "eagle-hal[plots]")')
        return written
    rows = report["results"]
    modes = list(dict.fromkeys(r["mode"] for r in rows))
    for key, name, label in (("tokens_per_s", "tokens_per_s.png", "output tokens/s"),
                             ("speedup", "speedup.png", "speedup over plain")):
        fig, ax = plt.subplots(figsize=(6, 4))
        for mode in modes:
            points = [(r["batch_size"], r[key]) for r in rows if r["mode"] == mode and key in r]
            if points:
                ax.plot(*zip(*points, strict=True), marker="o", label=mode)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("batch size")
        ax.set_ylabel(label)
        ax.legend()
        ax.grid(alpha=0.3)
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
        written.append(out / name)
    fig, ax = plt.subplots(figsize=(6, 4))
    for r in rows:
        if r["mode"] != "plain" and r["batch_size"] == min(report["config"]["batch_sizes"]):
            hist = r["accept_length_histogram"]
            ax.bar([float(k) for k in hist], list(hist.values()), width=0.08, alpha=0.5,
                   label=r["mode"])
    ax.set_xlabel("accept length per request (tokens per verify pass)")
    ax.set_ylabel("requests")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "accept_length_histogram.png", dpi=120)
    plt.close(fig)
    written.append(out / "accept_length_histogram.png")
    return written
