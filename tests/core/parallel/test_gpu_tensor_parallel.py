"""Tensor parallelism over 2 accelerators with the backend's collective (NCCL, HCCL...).

The same scenarios and oracle as test_tensor_parallel.py (the single-device engine over
the whole model, and plain decoding), on devices 0 and 1 of the host's accelerator.
Skipped unless the host has at least 2 accelerator devices.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.parallel import ParallelContext
from eagle_hal.parallel.checks import DEFAULT_SCENARIOS, compare, run_scenario, run_sharded


def _accelerator_type() -> str | None:
    if not hasattr(torch, "accelerator") or torch.accelerator.device_count() < 2:
        return None
    accelerator = torch.accelerator.current_accelerator()
    return None if accelerator is None else accelerator.type


pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(_accelerator_type() is None, reason="needs 2 accelerator devices"),
]


def test_two_devices_agree_with_one_device():
    """Greedy: token-identical to one device and to plain decoding; all scenarios: the two
    ranks agree bit for bit (tokens, base seed, prompt logits)."""
    from eagle_hal import select_backend

    kind = _accelerator_type()
    ranks = run_sharded(DEFAULT_SCENARIOS, world_size=2, device=kind)
    backend = select_backend(f"{kind}:0")
    single = {
        s.name: run_scenario(s, backend, ParallelContext.single(backend.torch_device))
        for s in DEFAULT_SCENARIOS
    }
    assert compare(DEFAULT_SCENARIOS, ranks, single) == []
