"""The backends and the plain-decoding oracle shared by the graph tests
(``test_graph_runner.py``, ``test_graph_draft_loop.py``).

The backends under test capture with the strict ``EmulatedGraphCapture``
(``eagle_hal.testing.graphs``): a replay re-runs a snapshot of the captured forward, so it
sees the static buffers' in-place updates and nothing else, as a device graph does. Their
attention is the Triton backend (interpreted; slow) or the pure-torch one with its own
graph hooks. ``plain`` is the oracle: greedy plain decoding through the eager CPU
reference backend (pure-torch attention, no graphs).
"""

from __future__ import annotations

from eagle_hal import select_backend
from eagle_hal.api import LLM
from eagle_hal.backends.cpu.backend import CpuBackend
from eagle_hal.engine.request import SamplingParams
from eagle_hal.hal.tree_mask import TreeMaskMode
from eagle_hal.ops.attention_reference import TorchAttentionBackend
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.testing.graphs import EmulatedGraphCapture

PROMPTS = [[1, 2, 3, 4, 5], [7, 8, 9], list(range(10, 30))]
PARAMS = SamplingParams(max_new_tokens=6)


class TritonCpuBackend(CpuBackend):
    """The CPU backend with the Triton attention (interpreted) and replaying graphs."""

    def create_attention_backend(self, config):
        from eagle_hal.ops.triton.attention import TritonAttentionBackend

        return TritonAttentionBackend(config)

    def graph_capture(self):
        return EmulatedGraphCapture()


class ReplayingTorchBackend(CpuBackend):
    """The CPU backend (reference attention) with emulated graphs."""

    def graph_capture(self):
        return EmulatedGraphCapture()


class BitPackedReplayingBackend(ReplayingTorchBackend):
    """Emulated graphs; the reference attention asks for bit-packed tree masks."""

    def create_attention_backend(self, config):
        return TorchAttentionBackend(config, tree_mask_mode=TreeMaskMode.BIT_PACKED)


class OneForwardPerGraphBackend(ReplayingTorchBackend):
    """Emulated graphs over an attention that does not allow several forwards per graph."""

    def create_attention_backend(self, config):
        attention = TorchAttentionBackend(config)
        attention.multi_forward_graphs = False
        return attention


def _backend(kind):
    reference = select_backend("cpu")
    return kind(reference.descriptor, reference.device_spec)


def plain(backend, target, prompts, max_context=512):
    llm = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0), seed=0,
                          max_context=max_context)
    return [o.token_ids for o in llm.generate(prompts, PARAMS)]
