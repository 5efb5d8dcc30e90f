"""Device operations per decoder layer in one batch-1 decode forward, counted on the CPU.

Builds a SmolLM2-135M-shaped target (random weights, small vocabulary), prefills a prompt
through a ``ModelRunner`` on the CPU backend, then counts the aten operations one DECODE
forward dispatches (views and allocations excluded: they launch nothing on a device). With
``--kernels triton`` the model uses the Triton model kernels (under ``TRITON_INTERPRET=1``);
each kernel call counts as one operation, the interpreter's own work not at all.

    TRITON_INTERPRET=1 python benchmarks/count_layer_ops.py --kernels reference,triton
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json

import torch
from eagle_hal import select_backend
from eagle_hal.engine.runner import CacheConfig, ModelRunner
from eagle_hal.hal.attention import ForwardMode
from eagle_hal.model.config import ModelConfig
from eagle_hal.model.llama import LlamaForCausalLM
from eagle_hal.testing.models import randomize
from torch.utils._python_dispatch import TorchDispatchMode

SMOLLM2_135M = dict(
    architecture="llama", vocab_size=1024, hidden_size=576, intermediate_size=1536,
    num_layers=30, num_heads=9, num_kv_heads=3, head_dim=64, max_position_embeddings=8192,
    rope_theta=100000.0, rms_norm_eps=1e-5, tie_word_embeddings=True,
)
_FREE = ("empty", "empty_like", "empty_strided", "new_empty", "lift_fresh", "detach")


def _aliases(out: object, args: tuple) -> bool:
    first = next((a for a in args if isinstance(a, torch.Tensor)), None)
    outs = out if isinstance(out, (list, tuple)) else [out]
    return first is not None and all(
        isinstance(o, torch.Tensor)
        and o.untyped_storage().data_ptr() == first.untyped_storage().data_ptr()
        for o in outs
    )


class OpCounter(TorchDispatchMode):
    """Counts the aten operations that would launch device work."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()  # inside decoder layers
        self.outside: collections.Counter[str] = collections.Counter()
        self.in_layer = False
        self.in_attention = False
        self.paused = 0

    def watch(self, layers) -> None:  # noqa: ANN001
        """Attribute operations inside ``layers`` to ``counts``, the rest to ``outside``."""
        for layer in layers:
            layer.register_forward_pre_hook(lambda *_: setattr(self, "in_layer", True))
            layer.register_forward_hook(lambda *_: setattr(self, "in_layer", False))

    def add(self, name: str) -> None:
        if self.in_layer and self.in_attention:
            name = f"attention:{name}"
        (self.counts if self.in_layer else self.outside)[name] += 1

    def watch_attention(self, attn) -> None:  # noqa: ANN001
        """Label operations inside ``attn.forward`` (KV write and attention) ``attention:``."""
        forward = attn.forward

        def labelled(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.in_attention = True
            try:
                return forward(*args, **kwargs)
            finally:
                self.in_attention = False

        attn.forward = labelled

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # noqa: ANN001
        name = func.overloadpacket.__name__
        out = func(*args, **(kwargs or {}))
        if not self.paused and name not in _FREE and not (func.is_view and _aliases(out, args)):
            self.add(name)  # ``to`` is a "view" op that copies when the dtype changes
        return out

    def kernel(self, name: str, fn):  # noqa: ANN001, ANN201
        """``fn`` counted as one operation ``name`` (what it does inside is not counted)."""

        def counted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            self.add(f"triton:{name}")
            self.paused += 1
            try:
                return fn(*args, **kwargs)
            finally:
                self.paused -= 1

        return counted


def count(kernels_name: str, prompt_len: int, dtype: torch.dtype) -> dict[str, object]:
    backend = select_backend("cpu")
    config = ModelConfig(**SMOLLM2_135M)
    target = LlamaForCausalLM(config, dtype=torch.float32)
    randomize(target, seed=0, scale=0.05)
    target.to(dtype)
    cache = CacheConfig(num_tokens=256, page_size=1, max_requests=2, max_context=128)
    runner = ModelRunner(backend, target, None, cache, dtype)
    counter = OpCounter()
    counter.watch(target.model.layers)
    if kernels_name == "triton":
        from eagle_hal.model.fusion import fuse_for_inference
        from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

        kernels = TRITON_MODEL_KERNELS
        wrapped = {f.name: counter.kernel(f.name, getattr(kernels, f.name))
                   for f in dataclasses.fields(kernels)}
        fuse_for_inference(dataclasses.replace(kernels, **wrapped), target)
    row = runner.table.add_request()
    runner.table.reserve(row, prompt_len + 1)
    runner.sync_table()
    prompt = runner.long(list(range(1, prompt_len + 1)))
    runner.run_target(runner.causal_batch(ForwardMode.EXTEND, prompt, [row], [0], [prompt_len]))
    batch = runner.causal_batch(ForwardMode.DECODE, runner.long([7]), [row], [prompt_len], [1])
    batch.attn_metadata = runner.target_attn.plan(batch)
    counter.watch_attention(runner.target_attn)
    counter.counts.clear()  # the wrapped kernels also counted the prefill
    counter.outside.clear()
    with torch.inference_mode(), counter:
        target.forward(batch, runner.target_attn)
    layers = config.num_layers
    inside = sum(counter.counts.values())
    attention = sum(n for name, n in counter.counts.items() if name.startswith("attention:"))
    per_layer = {name: round(n / layers, 2) for name, n in counter.counts.most_common()}
    return {"kernels": kernels_name, "dtype": str(dtype).removeprefix("torch."),
            "ops_per_forward": inside + sum(counter.outside.values()),
            "ops_per_layer": round(inside / layers, 2),
            "ops_per_layer_outside_attention": round((inside - attention) / layers, 2),
            "per_layer": per_layer, "outside_layers": dict(counter.outside)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", default="reference", help="reference,triton")
    parser.add_argument("--prompt-len", type=int, default=16)
    parser.add_argument("--dtype", default="float32")
    args = parser.parse_args()
    for name in args.kernels.split(","):
        print(json.dumps(count(name, args.prompt_len, getattr(torch, args.dtype))), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
