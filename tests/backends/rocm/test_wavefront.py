"""Wavefront sizes from device properties and the launch parameters derived from them."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from eagle_hal_rocm.wavefront import (
    WAVEFRONT_ENV,
    TritonLaunchParams,
    device_wavefront_size,
    launch_params,
    wavefront_size_for_arch,
)


@pytest.mark.parametrize("arch,expected", [
    ("gfx942:sramecc+:xnack-", 64),  # MI300X (CDNA3)
    ("gfx90a:sramecc+:xnack-", 64),  # MI200 (CDNA2)
    ("gfx908", 64),  # MI100 (CDNA1)
    ("gfx950", 64),  # MI350 (CDNA4)
    ("gfx1100", 32),  # RX 7900 (RDNA3)
    ("gfx1030", 32),  # RX 6800 (RDNA2)
    ("gfx1201", 32),  # RDNA4
])
def test_arch_families(arch, expected):
    assert wavefront_size_for_arch(arch) == expected


def test_unknown_arch_is_refused():
    for name in ("sm_90", "gfx", "gfx7"):
        with pytest.raises(ValueError):
            wavefront_size_for_arch(name)


def test_property_precedence():
    """Env override, then warp_size, then gcnArchName; nothing known raises."""
    cdna = SimpleNamespace(gcnArchName="gfx942:sramecc+:xnack-")
    assert device_wavefront_size(cdna, {}) == 64
    assert device_wavefront_size(SimpleNamespace(warp_size=32, gcnArchName="gfx942"), {}) == 32
    assert device_wavefront_size(cdna, {WAVEFRONT_ENV: "32"}) == 32
    with pytest.raises(ValueError, match="32 or 64"):
        device_wavefront_size(cdna, {WAVEFRONT_ENV: "48"})
    with pytest.raises(ValueError, match=WAVEFRONT_ENV):
        device_wavefront_size(SimpleNamespace(), {})


def test_launch_params_keep_threads_per_program():
    """Not a hard-coded 32: CDNA launches 4 wavefronts of 64, RDNA 8 of 32 (256 threads)."""
    cdna, rdna = launch_params(64), launch_params(32)
    assert (cdna.num_warps, rdna.num_warps) == (4, 8)
    assert cdna.threads_per_program == rdna.threads_per_program == 256
    assert cdna.as_kwargs() == {"num_warps": 4, "vocab_block": 4096, "vocab_chunk": 16384}
    with pytest.raises(ValueError):
        TritonLaunchParams(64, 4, 100, 16384)
