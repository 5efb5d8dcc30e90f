"""Self-distillation in several processes (``train.distill_workers``) against HF transformers'
greedy decoding of the same model: the processes together keep what one process would."""

from __future__ import annotations

import pytest
import torch

from .conftest import EOS


def _hf_greedy(model, ids: list[int], max_new_tokens: int) -> tuple[list[int], bool]:
    """HF greedy continuation of ``ids`` up to EOS (excluded); whether EOS ended it."""
    out = model.generate(torch.tensor([ids]), max_new_tokens=max_new_tokens, do_sample=False,
                         eos_token_id=EOS, pad_token_id=0)[0, len(ids):].tolist()
    if EOS in out:
        return out[: out.index(EOS)], True
    return out, False


@pytest.mark.parametrize("workers", [1, 2])
def test_workers_keep_what_one_process_would(workers, tiny_chat, tiny_chat_model, cpu_backend):
    """Greedy prompts and answers over 3 openers, 6 prompt indices: each opener's prompt is
    written twice, once in each of 2 shards (indices 0, 2, 4 and 1, 3, 5). The data set
    holds each once, as HF transformers writes and answers it, at its lowest index: the
    held-out ones (every 2nd index) are openers 0 and 2."""
    from eagle_hal.train.distill_workers import TargetSource, generate_dataset_in_workers
    from eagle_hal.train.selfdistill import DistillConfig, user_turn_prefix
    from transformers import AutoModelForCausalLM

    target, tokenizer = tiny_chat
    openers = ("w5 w6", "w9", "w7 w8")
    config = DistillConfig(
        num_prompts=6, max_prompt_tokens=4, max_new_tokens=3, prompt_temperatures=(0.0,),
        answer_temperatures=(0.0,), prompt_openers=openers, validation_fraction=0.5,
    )
    assert [config.opener(i) for i in range(6)] == list(openers) * 2
    source = TargetSource.of(tiny_chat_model, cpu_backend, torch.float32)
    data = generate_dataset_in_workers(cpu_backend, target, tokenizer, config, source, workers,
                                       progress=False)

    hf = AutoModelForCausalLM.from_pretrained(tiny_chat_model, torch_dtype=torch.float32)
    prefix = user_turn_prefix(tokenizer)
    expected = []
    for opener in openers:
        opener_ids = tokenizer.encode(opener, add_special_tokens=False)
        written, _ = _hf_greedy(hf, prefix + opener_ids, config.max_prompt_tokens)
        user = tokenizer.decode(opener_ids + written, skip_special_tokens=True).strip()
        templated = list(tokenizer.apply_chat_template([{"role": "user", "content": user}]))
        answer, stopped = _hf_greedy(hf, templated, config.max_new_tokens)
        expected.append(templated + answer + ([EOS] if stopped else []))
    assert len({tuple(e) for e in expected}) == 3  # the openers give 3 different prompts
    assert [data.sequence(i) for i in range(data.num_sequences)] == expected
    assert data.validation_indices().tolist() == [0, 2]  # openers 0 and 2: indices 0 and 2


def test_workers_must_be_positive(tiny_chat, tiny_chat_model, cpu_backend):
    from eagle_hal.train.distill_workers import TargetSource, generate_dataset_in_workers
    from eagle_hal.train.selfdistill import DistillConfig

    target, tokenizer = tiny_chat
    source = TargetSource.of(tiny_chat_model, cpu_backend, torch.float32)
    with pytest.raises(ValueError, match="workers"):
        generate_dataset_in_workers(cpu_backend, target, tokenizer, DistillConfig(), source, 0)


def test_a_shard_takes_every_nth_prompt(tiny_chat, cpu_backend):
    """Shard (1, 3) of 8 prompts writes prompts 1, 4 and 7, with their own openers (4
    distinct: no duplicate is dropped)."""
    from eagle_hal.train.selfdistill import DistillConfig, generate_shard

    target, tokenizer = tiny_chat
    config = DistillConfig(
        num_prompts=8, max_prompt_tokens=3, max_new_tokens=2, prompt_temperatures=(0.0,),
        answer_temperatures=(0.0,), prompt_openers=("w5", "w6", "w7", "w8"),
    )
    shard = generate_shard(cpu_backend, target, tokenizer, config, shard=(1, 3), progress=False)
    assert sorted(index for index, _, _, _ in shard.kept) == [1, 4, 7]
    with pytest.raises(ValueError, match="shard"):
        generate_shard(cpu_backend, target, tokenizer, config, shard=(3, 3), progress=False)
