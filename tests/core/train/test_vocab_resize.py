"""``eagle-hal train-draft --stage vocab --draft-vocab-coverage C`` with no data set: the
head's own ``draft_vocab.json`` gets the default size C asks for, from the counts it holds.

Oracle: a brute-force walk down the ranked counts for the smallest multiple of 1,024 tokens
that keeps C of them; the ranking, its counts and its source are untouched.
"""

from __future__ import annotations

import pytest
import torch
from eagle_hal.cli import main
from eagle_hal.model.draft_vocab import DraftVocabulary

VOCAB = 6000


def _brute_force_size(counts: list[int], coverage: float) -> int:
    total, kept = sum(counts), 0
    for n, count in enumerate(counts, start=1):
        kept += count
        if kept >= coverage * total:
            return min(-(-n // 1024) * 1024, len(counts))
    return len(counts)


@pytest.fixture
def head(tmp_path):
    generator = torch.Generator().manual_seed(0)
    counts = torch.randint(0, 1000, (VOCAB,), generator=generator) ** 2  # skewed, some zero
    source = {"data": [{"file": "gone.data.safetensors", "seed": 1}], "coverage": 0.995}
    (tmp_path / "head").mkdir()
    DraftVocabulary.from_counts(counts, source=source).save(tmp_path / "head")
    return tmp_path / "head"


@pytest.mark.parametrize("coverage", [0.5, 0.9, 0.97, 1.0])
def test_resize_from_the_files_own_counts(head, coverage):
    before = DraftVocabulary.load(head)
    command = ["train-draft", "--stage", "vocab", "--out", str(head), "--draft-vocab-coverage"]
    assert main([*command, str(coverage)]) == 0
    after = DraftVocabulary.load(head)
    assert after.default_size == _brute_force_size(list(before.counts), coverage)
    assert after.token_ids == before.token_ids and after.counts == before.counts
    assert after.source["data"] == before.source["data"] and after.source["coverage"] == coverage


def test_without_data_or_coverage_or_file_it_says_what_to_give(head, tmp_path, capsys):
    assert main(["train-draft", "--stage", "vocab", "--out", str(head)]) == 2
    assert "--draft-vocab-coverage to re-size" in capsys.readouterr().err
    assert main(["train-draft", "--stage", "vocab", "--out", str(tmp_path / "empty"),
                 "--draft-vocab-coverage", "0.9"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no draft_vocab.json" in err[0]
