"""The fused projections' launch configurations (``ops/triton/fused_linear_config``):
``LaunchConfig``'s checks and spellings, and the launch ``default_config`` picks per dtype
and row count under the ``EAGLE_HAL_FUSED_LINEAR_CONFIG``, ``EAGLE_HAL_GEMV`` and
``EAGLE_HAL_FUSED_LINEAR_WIDE`` overrides.

Oracle: the launch each spelling names, written out field by field; what the launches
compute is checked in ``test_fused_linear.py`` and ``test_fused_gemv_kernel.py``.
"""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("triton")

from eagle_hal.ops.triton import fused_linear as fused  # noqa: E402


def test_launch_config_is_validated():
    with pytest.raises(ValueError, match="splits"):
        fused.LaunchConfig(splits=0)
    with pytest.raises(ValueError, match="block_k"):
        fused.LaunchConfig(block_k=8)


def test_a_forced_launch_config_is_parsed_or_refused(monkeypatch):
    """EAGLE_HAL_FUSED_LINEAR_CONFIG picks the 16-bit launch; a malformed one says how."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "16x128x4x3x3")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(16, 128, 4, 3, 3)
    assert default_config(torch.float32, 1) == LaunchConfig(block_k=64)  # not forced
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "16x128x2x2")
    assert default_config(torch.float16, 4) == LaunchConfig(16, 128, 2, 2)
    for bad in ("16x128x0x3", "sixteen", "1x2x3x4x5x6"):
        monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_CONFIG"):
            default_config(torch.bfloat16, 1)


def test_rows_per_program_is_parsed_and_validated():
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig

    assert LaunchConfig.parse("g2x2pr1") == LaunchConfig(
        block_n=2, num_warps=2, gemv=True, prefetch=True, rows_per_program=1)
    assert LaunchConfig.parse("g4x2x2r4") == LaunchConfig(
        block_n=4, num_warps=2, gemv=True, block_m=2, rows_per_program=4)
    assert LaunchConfig.parse("g16x4x16dr16") == LaunchConfig(
        block_n=16, num_warps=4, gemv=True, block_m=16, dot=True, rows_per_program=16)
    assert LaunchConfig.parse("g2x2p").rows_per_program == 0
    for bad in ("g2x2pr", "g2x2r0", "g2x2rp", "g2x2r-1", "16x128x4x3r1"):
        with pytest.raises(ValueError, match="launch config"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="rows_per_program"):
        LaunchConfig(rows_per_program=2)
    with pytest.raises(ValueError, match="rows_per_program"):
        LaunchConfig(gemv=True, rows_per_program=-1)


def test_gemv_config_is_parsed_and_validated(monkeypatch):
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g4x2")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=4, num_warps=2,
                                                              gemv=True)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g2x2x4")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=2, num_warps=2,
                                                              gemv=True, block_m=4)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g2x2p")
    assert default_config(torch.bfloat16, 1) == LaunchConfig(block_n=2, num_warps=2,
                                                              gemv=True, prefetch=True)
    for bad in ("g4", "g3x4", "gx", "g2x2x3", "g2x2x4x1", "g2x2x4p"):
        monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_CONFIG"):
            default_config(torch.bfloat16, 1)
    with pytest.raises(ValueError, match="powers of two"):
        LaunchConfig(block_n=24, gemv=True)


def test_the_gemv_split_can_be_set_for_benchmarks(monkeypatch):
    """EAGLE_HAL_GEMV=ROWS:CONFIG moves the row count up to which 16-bit forwards take the
    gemv kernel, and its config; float32 never takes it; a malformed value says how."""
    from eagle_hal.ops.triton.fused_linear_config import GEMV_CONFIG, GEMV_ROWS, default_config

    assert default_config(torch.bfloat16, GEMV_ROWS) == GEMV_CONFIG
    assert not default_config(torch.bfloat16, GEMV_ROWS + 1).gemv
    monkeypatch.setenv("EAGLE_HAL_GEMV", "8:g2x2p")
    assert default_config(torch.bfloat16, 8).prefetch
    assert not default_config(torch.bfloat16, 9).gemv
    assert not default_config(torch.float32, 1).gemv
    for bad in ("8", "8:16x128x4x3", "17:g2x2", "x:g2x2"):
        monkeypatch.setenv("EAGLE_HAL_GEMV", bad)
        with pytest.raises(ValueError, match="EAGLE_HAL_GEMV"):
            default_config(torch.bfloat16, 1)


def test_gemv_dot_config_is_parsed_and_validated(monkeypatch):
    """``gBLOCK_NxWARPSxBLOCK_Md`` is dot mode, for block_n and block_m >= 16; it can be
    forced for 16-bit rows up to 16 or set as the gemv config; malformed ones say how."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    dot = LaunchConfig(block_n=16, num_warps=4, gemv=True, block_m=16, dot=True)
    assert LaunchConfig.parse("g16x4x16d") == dot
    assert LaunchConfig.parse("g32x8x32d") == LaunchConfig(block_n=32, num_warps=8,
                                                           gemv=True, block_m=32, dot=True)
    assert not LaunchConfig.parse("g16x4x16").dot
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_CONFIG", "g16x4x16d")
    assert default_config(torch.bfloat16, 5) == dot
    assert default_config(torch.bfloat16, 16) == dot
    assert not default_config(torch.bfloat16, 17).gemv
    monkeypatch.delenv("EAGLE_HAL_FUSED_LINEAR_CONFIG")
    monkeypatch.setenv("EAGLE_HAL_GEMV", "16:g16x4x16d")
    assert default_config(torch.bfloat16, 16) == dot
    assert not default_config(torch.float32, 16).gemv
    for bad in ("g16x4d", "g8x4x16d", "g16x4x8d", "g16x4x16pd", "g16x4x16dp", "g16x4xd",
                "16x128x4x3d"):
        with pytest.raises(ValueError, match=r"gBLOCK_NxWARPS\[xBLOCK_M\]\[p\|d\]"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_m=16, dot=True)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_n=8, gemv=True, block_m=16, dot=True)


def test_the_wide_rows_config_is_chosen_by_environment(monkeypatch) -> None:
    """EAGLE_HAL_FUSED_LINEAR_WIDE picks the launch past the gemv split up to 16 rows;
    the gemv rows keep theirs."""
    from eagle_hal.ops.triton.fused_linear_config import (
        GEMV_CONFIG,
        GEMV_ROWS,
        LaunchConfig,
        default_config,
    )

    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_WIDE", "g16x8x16d")
    assert default_config(torch.bfloat16, GEMV_ROWS) == GEMV_CONFIG
    assert default_config(torch.bfloat16, 16) == LaunchConfig.parse("g16x8x16d")
    assert default_config(torch.bfloat16, 17) == LaunchConfig(block_k=64)
    monkeypatch.setenv("EAGLE_HAL_FUSED_LINEAR_WIDE", "bad")
    with pytest.raises(ValueError, match="EAGLE_HAL_FUSED_LINEAR_WIDE"):
        default_config(torch.bfloat16, 8)
