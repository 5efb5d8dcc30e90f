"""The data set container: padding, splits, and a safetensors round trip.

Oracle: Python lists built by hand.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.train.dataset import DatasetInfo, DistillDataset

INFO = DatasetInfo(
    target="tiny",
    target_sha256="0" * 64,
    seed=5,
    num_prompts=4,
    max_prompt_tokens=8,
    max_new_tokens=16,
    prompt_temperatures=(1.0,),
    answer_temperatures=(0.0, 0.7),
    top_p=0.9,
    generation_seconds=1.5,
    command="eagle-hal train-draft",
)
SEQUENCES = [[1, 2, 3, 4, 5], [6, 7, 8], [9, 10, 11, 12, 13, 14, 15], [16, 17, 18, 19]]
STARTS = [3, 2, 5, 2]


def _dataset():
    return DistillDataset.from_sequences(
        SEQUENCES, STARTS, [False, True, False, False], [0.0, 0.7, 0.0, 0.7], INFO
    )


def test_sequences_prompts_and_splits():
    """Views return what was stored; the split lists the held-out sequences."""
    data = _dataset()
    assert data.num_sequences == 4 and data.num_tokens == 19
    answers = [len(s) - a for s, a in zip(SEQUENCES, STARTS, strict=True)]
    assert data.num_answer_tokens == sum(answers)
    assert [data.sequence(i) for i in range(4)] == SEQUENCES
    assert data.prompt(2) == [9, 10, 11, 12, 13]
    assert data.train_indices().tolist() == [0, 2, 3]
    assert data.validation_indices().tolist() == [1]


def test_padded_rows():
    """Rows are right-padded with 0 to the longest chosen sequence."""
    rows = _dataset().padded(torch.tensor([3, 1, 0]))
    expected = [SEQUENCES[i] + [0] * (5 - len(SEQUENCES[i])) for i in (3, 1, 0)]
    assert rows.tokens.tolist() == expected
    assert rows.lengths.tolist() == [4, 3, 5]
    assert rows.answer_starts.tolist() == [2, 2, 3]


def test_round_trip(tmp_path):
    """save/load keeps every tensor and the provenance."""
    data = _dataset()
    data.save(tmp_path / "sub" / "data.safetensors")
    loaded = DistillDataset.load(tmp_path / "sub" / "data.safetensors")
    assert [loaded.sequence(i) for i in range(4)] == SEQUENCES
    assert loaded.answer_starts.tolist() == STARTS
    assert loaded.is_validation.tolist() == [False, True, False, False]
    assert loaded.answer_temperatures.tolist() == pytest.approx([0.0, 0.7, 0.0, 0.7])
    assert loaded.info == INFO


def test_rejects_bad_boundaries_and_foreign_files(tmp_path):
    """An empty answer is refused; a safetensors file without our metadata is refused."""
    with pytest.raises(ValueError, match="answer"):
        DistillDataset.from_sequences([[1, 2, 3]], [3], [False], [0.0], INFO)
    from safetensors.torch import save_file

    save_file({"x": torch.zeros(1)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not an eagle-hal"):
        DistillDataset.load(tmp_path / "other.safetensors")
    with pytest.raises(FileNotFoundError, match="--stage data"):
        DistillDataset.load(tmp_path / "missing.safetensors")
