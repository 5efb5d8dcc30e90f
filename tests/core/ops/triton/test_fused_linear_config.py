"""The fused projections' launch configurations (``ops/triton/fused_linear_config``):
``LaunchConfig``'s checks and spellings, and the launch ``default_config`` picks per dtype
and row count under the default ``LaunchPolicy`` and under policies with a forced launch, a
moved gemv split or a wide-rows launch.

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


def forced(text):
    """The default policy with every 16-bit row count up to 16 on the launch ``text``."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, LaunchPolicy

    return LaunchPolicy(forced=LaunchConfig.parse(text))


def test_a_forced_launch_config_is_parsed_or_refused():
    """``LaunchPolicy.forced`` picks the 16-bit launch; a malformed spelling says how."""
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    policy = forced("16x128x4x3x3")
    assert default_config(torch.bfloat16, 1, policy) == LaunchConfig(16, 128, 4, 3, 3)
    assert default_config(torch.float32, 1, policy) == LaunchConfig(block_k=64)  # not forced
    assert default_config(torch.float16, 4, forced("16x128x2x2")) == LaunchConfig(16, 128, 2, 2)
    for bad in ("16x128x0x3", "sixteen", "1x2x3x4x5x6"):
        with pytest.raises(ValueError, match="launch config"):
            forced(bad)


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


def test_gemv_config_is_parsed_and_validated():
    from eagle_hal.ops.triton.fused_linear_config import LaunchConfig, default_config

    assert default_config(torch.bfloat16, 1, forced("g4x2")) == LaunchConfig(
        block_n=4, num_warps=2, gemv=True)
    assert default_config(torch.bfloat16, 1, forced("g2x2x4")) == LaunchConfig(
        block_n=2, num_warps=2, gemv=True, block_m=4)
    assert default_config(torch.bfloat16, 1, forced("g2x2p")) == LaunchConfig(
        block_n=2, num_warps=2, gemv=True, prefetch=True)
    for bad in ("g4", "g3x4", "gx", "g2x2x3", "g2x2x4x1", "g2x2x4p"):
        with pytest.raises(ValueError, match="launch config"):
            forced(bad)
    with pytest.raises(ValueError, match="powers of two"):
        LaunchConfig(block_n=24, gemv=True)


def test_the_gemv_split_can_be_set_for_benchmarks():
    """``LaunchPolicy(gemv_rows=, gemv=)`` (spelt ``ROWS:CONFIG`` by
    ``LaunchPolicy.with_gemv_split``) moves the row count up to which 16-bit forwards take
    the gemv kernel, and its config; float32 never takes it; a malformed value says how."""
    from eagle_hal.ops.triton.fused_linear_config import (
        DEFAULT_POLICY,
        GEMV_CONFIG,
        GEMV_ROWS,
        LaunchConfig,
        LaunchPolicy,
        default_config,
    )

    assert default_config(torch.bfloat16, GEMV_ROWS) == GEMV_CONFIG
    assert default_config(torch.bfloat16, GEMV_ROWS, DEFAULT_POLICY) == GEMV_CONFIG
    assert not default_config(torch.bfloat16, GEMV_ROWS + 1).gemv
    policy = LaunchPolicy.with_gemv_split("8:g2x2p")
    assert policy == LaunchPolicy(gemv_rows=8, gemv=LaunchConfig.parse("g2x2p"))
    assert default_config(torch.bfloat16, 8, policy).prefetch
    assert not default_config(torch.bfloat16, 9, policy).gemv
    assert not default_config(torch.float32, 1, policy).gemv
    for bad in ("8", "8:16x128x4x3", "17:g2x2", "x:g2x2"):
        with pytest.raises(ValueError, match="gemv split"):
            LaunchPolicy.with_gemv_split(bad)
    with pytest.raises(ValueError, match="gemv_rows"):
        LaunchPolicy(gemv_rows=17)
    with pytest.raises(ValueError, match="gemv must be a gemv launch"):
        LaunchPolicy(gemv=LaunchConfig())


def test_gemv_dot_config_is_parsed_and_validated():
    """``gBLOCK_NxWARPSxBLOCK_Md`` is dot mode, for block_n and block_m >= 16; it can be
    forced for 16-bit rows up to 16 or set as the gemv config; malformed ones say how."""
    from eagle_hal.ops.triton.fused_linear_config import (
        LaunchConfig,
        LaunchPolicy,
        default_config,
    )

    dot = LaunchConfig(block_n=16, num_warps=4, gemv=True, block_m=16, dot=True)
    assert LaunchConfig.parse("g16x4x16d") == dot
    assert LaunchConfig.parse("g32x8x32d") == LaunchConfig(block_n=32, num_warps=8,
                                                           gemv=True, block_m=32, dot=True)
    assert not LaunchConfig.parse("g16x4x16").dot
    policy = forced("g16x4x16d")
    assert default_config(torch.bfloat16, 5, policy) == dot
    assert default_config(torch.bfloat16, 16, policy) == dot
    assert not default_config(torch.bfloat16, 17, policy).gemv
    policy = LaunchPolicy.with_gemv_split("16:g16x4x16d")
    assert default_config(torch.bfloat16, 16, policy) == dot
    assert not default_config(torch.float32, 16, policy).gemv
    for bad in ("g16x4d", "g8x4x16d", "g16x4x8d", "g16x4x16pd", "g16x4x16dp", "g16x4xd",
                "16x128x4x3d"):
        with pytest.raises(ValueError, match=r"gBLOCK_NxWARPS\[xBLOCK_M\]\[p\|d\]"):
            LaunchConfig.parse(bad)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_m=16, dot=True)
    with pytest.raises(ValueError, match="dot is for the gemv kernel"):
        LaunchConfig(block_n=8, gemv=True, block_m=16, dot=True)


def test_the_wide_rows_config_is_chosen_by_the_policy() -> None:
    """``LaunchPolicy.wide`` picks the launch past the gemv split up to 16 rows; the gemv
    rows keep theirs; by default those rows take 256-wide ``tl.dot`` tiles."""
    from eagle_hal.ops.triton.fused_linear_config import (
        GEMV_CONFIG,
        GEMV_ROWS,
        LaunchConfig,
        LaunchPolicy,
        default_config,
    )

    policy = LaunchPolicy(wide=LaunchConfig.parse("g16x8x16d"))
    assert default_config(torch.bfloat16, GEMV_ROWS, policy) == GEMV_CONFIG
    assert default_config(torch.bfloat16, 16, policy) == LaunchConfig.parse("g16x8x16d")
    assert default_config(torch.bfloat16, 17, policy) == LaunchConfig(block_k=64)
    assert default_config(torch.bfloat16, 8) == LaunchConfig(block_k=256)
    with pytest.raises(ValueError, match="launch config"):
        LaunchPolicy(wide=LaunchConfig.parse("bad"))


def test_the_kernels_bundle_launches_under_its_policy(monkeypatch) -> None:
    """``fused_linear_kernels(policy, max_tokens_16bit)`` is the bundle a model's kernels
    take to measure another launch choice end to end: its projections launch under that
    policy; the default bundle is ``FUSED_LINEAR_KERNELS`` with the plain functions."""
    from eagle_hal.ops.triton import fused_linear as fl
    from eagle_hal.ops.triton.fused_linear_config import GEMV_CONFIG, LaunchConfig

    assert fl.fused_linear_kernels() == fl.FUSED_LINEAR_KERNELS
    assert fl.FUSED_LINEAR_KERNELS.linear is fl.linear
    assert fl.FUSED_LINEAR_KERNELS.max_tokens_16bit == fl.MAX_TOKENS_16BIT == 16
    launched = []
    monkeypatch.setattr(fl, "_launch", lambda *args, config, **kwargs: launched.append(config))
    kernels = fl.fused_linear_kernels(forced("g4x2"), max_tokens_16bit=32)
    x = torch.zeros(2, 64, dtype=torch.bfloat16)
    weight = torch.zeros(32, 64, dtype=torch.bfloat16)
    kernels.linear(x, weight, None, None)
    fl.FUSED_LINEAR_KERNELS.linear(x, weight, None, None)
    assert launched == [LaunchConfig.parse("g4x2"), GEMV_CONFIG]
    assert kernels.max_tokens_16bit == 32 and kernels.max_tokens == fl.MAX_TOKENS
