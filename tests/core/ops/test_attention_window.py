"""Sliding windows and soft-capped scores in the attention contract: the conformance
suite's windowed and capped checks (a float64 oracle over the keys each query may see) on
the reference, composite-verify and Triton (interpreted) attention; the suite failing an
attention that declares windows but ignores them; a fast path deferring windowed models to
its fallback; and the engine's refusal of a model its backend cannot run."""

from __future__ import annotations

import dataclasses
import importlib.util
import os

import pytest
import torch
from eagle_hal.backends.cpu.backend import CpuBackend
from eagle_hal.backends.cpu.plugin import CAPABILITIES, DESCRIPTOR
from eagle_hal.conformance import run_suite
from eagle_hal.device import parse_device
from eagle_hal.engine.runner import check_attention_features
from eagle_hal.hal.attention import AttentionConfig
from eagle_hal.ops.attention_composite import CompositeTreeAttentionBackend
from eagle_hal.ops.attention_fast_path import FastPathAttention
from eagle_hal.ops.attention_reference import TorchAttentionBackend

SELECT = ["-k", "windowed or softcapped"]
TRITON = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" or importlib.util.find_spec("triton") is None,
    reason="needs triton and TRITON_INTERPRET=1 to run the kernels on the CPU",
)


class CpuWith(CpuBackend):
    """The cpu backend with another attention and, optionally, other capabilities."""

    def __init__(self, attention, caps=CAPABILITIES):
        super().__init__(DESCRIPTOR, parse_device("cpu"))
        self._attention, self._caps = attention, caps

    @property
    def capabilities(self):
        return self._caps

    def create_attention_backend(self, config):
        return self._attention(config)


def _suite(backend, select=SELECT):
    report = run_suite("cpu", backend=backend, areas=["attention"], extra_args=select)
    assert report.results, "no windowed or soft-capped check ran"
    return report


def _assert_green(report):
    failed = [r.message for r in report.results if r.outcome.is_failure]
    assert not failed, failed
    assert report.counts()["pass"] == len(report.results)


def test_reference_attention_passes_window_and_softcap_checks():
    _assert_green(_suite(CpuWith(TorchAttentionBackend)))


def test_composite_verify_passes_window_and_softcap_checks():
    """Prefix + tree + merge (TARGET_VERIFY), the reference for the other modes."""
    _assert_green(_suite(CpuWith(CompositeTreeAttentionBackend)))


@TRITON
def test_triton_attention_passes_window_and_softcap_checks():
    """The split kernel, interpreted: few tokens give several key splits (decode, verify).
    Window and cap at once, float32 (the interpreter is slow; the GPU runs every check)."""
    from eagle_hal.ops.triton.attention import TritonAttentionBackend

    caps = dataclasses.replace(CAPABILITIES, tree_mask_modes=("tree_block",))
    _assert_green(_suite(CpuWith(TritonAttentionBackend, caps), ["-k", "windowed_softcapped"]))


def test_suite_fails_an_attention_that_ignores_windows_and_caps():
    """An attention that declares both but drops them from its config fails every
    windowed and capped check that can tell (decode over a short prefix cannot)."""

    def blind(config):
        return TorchAttentionBackend(
            dataclasses.replace(config, layer_windows=(), logit_softcap=None))

    report = run_suite("cpu", backend=CpuWith(blind), areas=["attention"], extra_args=SELECT)
    failed = {r.check_id for r in report.results if r.outcome.is_failure}
    assert len(failed) >= len(report.results) - 2, sorted(failed)
    assert any("windowed_forward" in c for c in failed)
    assert any("softcapped_forward" in c for c in failed)


class _NeverServed(FastPathAttention):
    """A fast path that would take every forward and cannot compute any."""

    metadata_type = type("NeverMetadata", (), {})

    def serves(self, batch):
        return True

    def plan_fast(self, batch):  # pragma: no cover - must not be reached
        raise AssertionError("a windowed model reached a fast path that ignores windows")

    def forward_fast(self, layer, q, k, v, batch, metadata):  # pragma: no cover
        raise AssertionError("unreachable")


def test_fast_path_defers_windowed_and_capped_models_to_its_fallback():
    _assert_green(_suite(CpuWith(lambda c: _NeverServed(c, TorchAttentionBackend(c)))))


def _config(windows=(None, 8), softcap=None):
    return AttentionConfig(2, 1, 8, 2, 8**-0.5, kv_store=None,  # type: ignore[arg-type]
                           req_to_token=torch.zeros(1, 1), layer_windows=windows,
                           logit_softcap=softcap)


def test_engine_refuses_what_the_backend_cannot_compute():
    """Without Capabilities.sliding_window a windowed model runs only within its window
    (then without the windows); without logit_softcap a capped model does not run."""
    plain = CpuWith(TorchAttentionBackend, dataclasses.replace(
        CAPABILITIES, sliding_window=False, logit_softcap=False))
    with pytest.raises(ValueError, match=r"backend 'cpu' does not apply windows.*within 8"):
        check_attention_features(plain, _config(), max_context=9)
    assert check_attention_features(plain, _config(), max_context=8).layer_windows == ()
    with pytest.raises(ValueError, match="backend 'cpu' does not.*logit_softcap"):
        check_attention_features(plain, _config((), 50.0), max_context=4)
    full = CpuWith(TorchAttentionBackend)
    assert check_attention_features(full, _config((None, 8), 50.0), 4096) == _config(
        (None, 8), 50.0)


def test_attention_config_checks_its_windows():
    with pytest.raises(ValueError, match="entries for 2 layers"):
        _config((8,))
    with pytest.raises(ValueError, match=">= 1"):
        _config((None, 0))
    with pytest.raises(ValueError, match="logit_softcap"):
        _config((), 0.0)
    assert _config().window(1) == 8 and _config().window(0) is None and _config().windowed
    assert _config(()).window(1) is None and not _config(()).windowed
