"""`eagle-hal train-draft` on an accelerator: the bf16-autocast path, end to end (tiny model).

Oracles as on the CPU: the training loss falls; the saved head loads and, in float32,
speculative greedy decoding with it equals plain greedy decoding on the same device.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.api import LLM
from eagle_hal.cli import main
from eagle_hal.engine.request import SamplingParams
from eagle_hal.model.loading import load_eagle_head, load_target
from eagle_hal.speculative.config import SpecConfig
from eagle_hal.train.checkpoint import read_recipe
from eagle_hal.train.dataset import DistillDataset

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def accelerator():
    if not torch.accelerator.is_available():
        pytest.skip("no accelerator")
    return torch.accelerator.current_accelerator()


@pytest.mark.parametrize(
    "variant,model_fixture,extra",
    [
        ("eagle1", "tiny_chat_model", []),
        ("eagle3", "tiny_chat_model_deep", ["--variant", "eagle3", "--unroll-steps", "2"]),
    ],
)
def test_train_draft_bf16_on_accelerator(tmp_path, request, accelerator, variant,
                                         model_fixture, extra):
    """Stage all in bfloat16 on the accelerator (EAGLE-1, and EAGLE-3 unrolled over 2
    steps on a deeper target); the head decodes losslessly there."""
    from eagle_hal import select_backend

    tiny_chat_model = request.getfixturevalue(model_fixture)
    out = tmp_path / "head"
    args = [
        "train-draft",
        "--device",
        accelerator.type,
        "--dtype",
        "bfloat16",
        "--model",
        str(tiny_chat_model),
        "--out",
        str(out),
        "--seed",
        "4",
        "--no-progress",
        "--num-prompts",
        "48",
        "--max-prompt-tokens",
        "12",
        "--max-new-tokens",
        "32",
        "--gen-batch-size",
        "48",
        "--validation-fraction",
        "0.125",
        "--steps",
        "160",
        "--batch-size",
        "8",
        "--lr",
        "3e-3",
        "--validate-every",
        "80",
        "--validation-prompts",
        "4",
        "--validation-new-tokens",
        "16",
        *extra,
    ]
    assert main(args) == 0
    recipe = read_recipe(out)
    assert recipe["steps"] == 160 and recipe["train"]["variant"] == variant
    assert recipe["train_loss_last"] < 0.9 * recipe["train_loss_first"]

    backend = select_backend(accelerator.type)
    target, _ = load_target(
        tiny_chat_model, dtype=torch.float32, device=backend.torch_device, progress=False
    )
    head = load_eagle_head(out, target, dtype=torch.float32)
    dataset = DistillDataset.load(tmp_path / "head.data.safetensors")
    prompts = [dataset.prompt(int(i)) for i in dataset.validation_indices()]
    params = SamplingParams(max_new_tokens=24)
    plain = LLM.from_models(backend, target, None, spec=SpecConfig(num_steps=0)).generate(
        prompts, params
    )
    spec = LLM.from_models(backend, target, head, spec=SpecConfig(num_steps=5, topk=1)).generate(
        prompts, params
    )
    assert [o.token_ids for o in spec] == [p.token_ids for p in plain]
