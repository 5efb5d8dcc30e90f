"""Draft vocabularies: the ranking, its file, and a head restricted to it.

Oracles: a ranking and a default size worked out by hand (Python's sort and a running sum),
answer tokens counted one by one, and the draft's top-k over its vocabulary computed from
the target's full logits (masked to the vocabulary, softmax over what is left).
"""

from __future__ import annotations

import collections
import json

import pytest
import torch
from eagle_hal.backend import Backend
from eagle_hal.backends.cpu.kernels import cpu_model_kernels
from eagle_hal.model import draft_vocab
from eagle_hal.model.draft_vocab import DraftVocabulary, count_answer_tokens, parse_size, restrict
from eagle_hal.model.errors import ModelFileNotFound, UnsupportedModelError
from eagle_hal.model.fusion import fuse_for_inference
from eagle_hal.ops.reference_model import REFERENCE_MODEL_KERNELS
from eagle_hal.registry import Registry
from eagle_hal.testing.models import tiny_eagle1, tiny_target
from eagle_hal.train.dataset import DatasetInfo, DistillDataset


def _hand_ranking(counts):
    pairs = sorted(((c, i) for i, c in enumerate(counts) if c > 0), key=lambda p: (-p[0], p[1]))
    return [i for _, i in pairs], [c for c, _ in pairs]


def test_ranking_and_default_size_match_a_hand_count():
    """Most frequent first, ties to the smaller id, unseen tokens left out; the default size
    is the first multiple of 1,024 whose running sum reaches the coverage."""
    gen = torch.Generator().manual_seed(0)
    counts = (torch.rand(5000, generator=gen) ** 8 * 50).long()  # many zeros and ties
    counts[:3] = torch.tensor([7, 7, 0])
    vocabulary = DraftVocabulary.from_counts(counts, coverage=0.9)
    ids, ranked = _hand_ranking(counts.tolist())
    assert list(vocabulary.token_ids) == ids and list(vocabulary.counts) == ranked
    total, running, needed = sum(ranked), 0, None
    for n, c in enumerate(ranked, start=1):
        running += c
        if running >= 0.9 * total:
            needed = n
            break
    expected = min(-(-needed // 1024) * 1024, len(ids))
    assert vocabulary.default_size == expected
    assert vocabulary.coverage(vocabulary.default_size) >= 0.9
    assert 2 not in vocabulary.token_ids  # never seen


def test_default_size_is_capped_at_the_tokens_seen():
    counts = torch.zeros(3000, dtype=torch.int64)
    counts[[5, 9, 2000]] = torch.tensor([3, 2, 1])
    vocabulary = DraftVocabulary.from_counts(counts, coverage=1.0)
    assert vocabulary.token_ids == (5, 9, 2000) and vocabulary.default_size == 3
    assert vocabulary.ids().tolist() == [5, 9, 2000]
    assert vocabulary.ids(2).tolist() == [5, 9]
    assert vocabulary.ids(6).tolist() == [5, 9, 2000, 0, 1, 2]  # then the unseen, by id
    assert sorted(vocabulary.ids(3000).tolist()) == list(range(3000))
    with pytest.raises(ValueError, match="1..3000 tokens, not 3001"):
        vocabulary.ids(3001)


def test_file_round_trip_and_bad_files(tmp_path):
    counts = torch.tensor([0, 4, 9, 1, 0, 4])
    vocabulary = DraftVocabulary.from_counts(counts, source={"data": "x.data.safetensors"})
    vocabulary.save(tmp_path)
    assert DraftVocabulary.load(tmp_path) == vocabulary
    assert DraftVocabulary.load(tmp_path / "missing") is None
    raw = json.loads((tmp_path / draft_vocab.FILE_NAME).read_text())
    raw["counts"] = [1, 2, 3, 4]  # increasing
    (tmp_path / draft_vocab.FILE_NAME).write_text(json.dumps(raw))
    with pytest.raises(UnsupportedModelError, match="non-increasing"):
        DraftVocabulary.load(tmp_path)
    (tmp_path / draft_vocab.FILE_NAME).write_text('{"format": "something else"}')
    with pytest.raises(UnsupportedModelError, match="format"):
        DraftVocabulary.load(tmp_path)


def test_bad_vocabularies_are_refused():
    with pytest.raises(ValueError, match="twice"):
        DraftVocabulary((1, 1), (2, 1), 10, 1)
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        DraftVocabulary((1, 10), (2, 1), 10, 1)
    with pytest.raises(ValueError, match="default_size"):
        DraftVocabulary((1, 2), (2, 1), 10, 3)
    with pytest.raises(ValueError, match="at least one token counted"):
        DraftVocabulary.from_counts(torch.zeros(10, dtype=torch.int64))


def test_answer_tokens_counted_one_by_one():
    """Only answers (after each sequence's answer start) of training sequences count."""
    sequences = [([1, 2, 3, 4, 4, 5], 3, False), ([6, 4, 7], 2, True), ([9, 9, 1, 2], 2, False)]
    tokens = torch.tensor([t for s, _, _ in sequences for t in s])
    offsets = torch.tensor([0, 6, 9, 13])
    info = DatasetInfo("t", "", 0, 3, 8, 8, (1.0,), (0.0,), 0.95, 0.0)
    dataset = DistillDataset(
        tokens, offsets, torch.tensor([a for _, a, _ in sequences]),
        torch.tensor([v for _, _, v in sequences]), torch.zeros(3), info,
    )
    expected = collections.Counter()
    for seq, start, held_out in sequences:
        if not held_out:
            expected.update(seq[start:])
    counts = count_answer_tokens(dataset, 12)
    assert {i: c for i, c in enumerate(counts.tolist()) if c} == dict(expected)


def test_parse_size():
    assert parse_size("default") == "default" and parse_size(" FULL ") == "full"
    assert parse_size("Auto") == "auto"
    assert parse_size("8192") == 8192 and parse_size(16) == 16
    for bad in ("0", "-3", "lots", 0):
        with pytest.raises(ValueError, match="positive number"):
            parse_size(bad)


# -- a head restricted to a draft vocabulary -------------------------------------------------

@pytest.fixture(scope="module")
def pair():
    target = tiny_target(seed=21, vocab=97)
    return target, tiny_eagle1(target, seed=22)


@pytest.mark.parametrize("kernels", ["unfused", "reference", "cpu"])
def test_restricted_topk_is_the_full_softmax_renormalised_over_the_vocabulary(kernels):
    """top-k ids and probabilities equal those of the target's full logits with every
    token outside the vocabulary masked out, whichever kernels compute the lm_head rows
    (F.linear, or the CPU backend's transposed product)."""
    target = tiny_target(seed=21, vocab=97)
    head = tiny_eagle1(target, seed=22)
    if kernels != "unfused":
        fuse_for_inference(
            REFERENCE_MODEL_KERNELS if kernels == "reference" else cpu_model_kernels(),
            target, head,
        )
        assert (head.kernels.logits is not None) == (kernels == "cpu")
    ids = torch.tensor([50, 3, 96, 7, 0, 41, 12, 88, 60, 61, 62, 30])
    view = head.with_vocabulary(ids)
    hidden = torch.randn(5, target.config.hidden_size, generator=torch.Generator().manual_seed(1))
    full = hidden.double() @ target.lm_head.weight.double().T  # [5, 97]
    masked = torch.full_like(full, float("-inf"))
    masked[:, ids] = full[:, ids]
    expected_probs, expected_ids = torch.softmax(masked, -1).topk(4, dim=-1)
    probs, got_ids = view.topk(hidden, 4)
    assert got_ids.tolist() == expected_ids.tolist()
    torch.testing.assert_close(probs.double(), expected_probs, atol=1e-5, rtol=1e-5)
    logits = view.compute_logits(hidden)  # the draft's distribution over the target vocabulary
    outside = torch.ones(97, dtype=torch.bool)
    outside[ids] = False
    assert torch.isinf(logits[:, outside]).all()
    torch.testing.assert_close(logits[:, ids].double(), full[:, ids], atol=1e-4, rtol=1e-5)
    assert view.draft_vocab_size == 12 and head.draft_vocab_size == 97
    whole_probs, whole_ids = head.topk(hidden[:1], 4)  # the whole vocabulary, a single row
    expected_probs, expected_ids = torch.softmax(full[:1], -1).topk(4, dim=-1)
    assert whole_ids.tolist() == expected_ids.tolist()
    torch.testing.assert_close(whole_probs.double(), expected_probs, atol=1e-5, rtol=1e-5)


def test_a_view_shares_the_head_and_leaves_it_whole(pair):
    target, head = pair
    view = head.with_vocabulary(torch.tensor([1, 2, 3]))
    assert view.fc.weight is head.fc.weight and view.layers[0] is head.layers[0]
    hidden = torch.randn(2, target.config.hidden_size)
    _, ids = head.topk(hidden, 3)
    expected = (hidden @ target.lm_head.weight.T).topk(3, dim=-1).indices
    assert ids.tolist() == expected.tolist()  # the head itself still drafts from all 97
    assert head.with_vocabulary(None).draft_vocab_size == 97
    for bad in ([], [1, 1], [97], [-1]):
        with pytest.raises(ValueError):
            head.with_vocabulary(torch.tensor(bad, dtype=torch.int64))


class _NoVocabularyPreference:
    """A backend that, like the base ``Backend``, prefers the whole vocabulary."""

    prefers_draft_vocabulary = False


def test_restrict_reads_the_head_directory(pair, tmp_path):
    target, head = pair
    counts = torch.zeros(97, dtype=torch.int64)
    counts[:40] = torch.arange(40, 0, -1)
    assert restrict(head, tmp_path, "default") is head  # no file: the whole vocabulary
    with pytest.raises(ModelFileNotFound, match="--stage vocab"):
        restrict(head, tmp_path, 8)
    DraftVocabulary.from_counts(counts, coverage=0.5).save(tmp_path)
    assert restrict(head, tmp_path, "full") is head
    assert restrict(head, tmp_path, 200) is head  # as large as the target's: nothing to cut
    assert restrict(head, tmp_path, "default").draft_vocab_size == 40  # capped at tokens seen
    assert restrict(head, tmp_path, 8)._vocab_ids.tolist() == list(range(8))
    # 40 seen, then id 40
    assert restrict(head, tmp_path, 41)._vocab_ids.tolist() == list(range(41))
    # "auto": the backend's choice, the whole vocabulary without one
    cpu = Registry(allow="cpu", environ={}).select("cpu")
    assert cpu.prefers_draft_vocabulary
    assert restrict(head, tmp_path, "auto", cpu).draft_vocab_size == 40
    assert restrict(head, tmp_path, "auto") is head
    assert restrict(head, tmp_path, "auto", _NoVocabularyPreference()) is head
    assert Backend.prefers_draft_vocabulary.fget(cpu) is False  # the base class's default
    other = DraftVocabulary.from_counts(torch.ones(50, dtype=torch.int64))
    other.save(tmp_path)
    with pytest.raises(UnsupportedModelError, match="the target has 97"):
        restrict(head, tmp_path, "default")


def test_sizes_a_head_cannot_use_are_refused_early(pair, tmp_path, capsys):
    """A number of tokens without a ranking fails before any model loads; a vocabulary
    smaller than the tree's top-k, an EAGLE-3-like head given a number, a bad size on the
    command line and a data set of another vocabulary each fail with what to do."""
    from eagle_hal import select_backend
    from eagle_hal.api import LLM
    from eagle_hal.cli import main
    from eagle_hal.speculative.config import SpecConfig

    cpu_backend = select_backend("cpu")

    with pytest.raises(ModelFileNotFound, match="--stage vocab"):
        LLM(draft=str(tmp_path), draft_vocab=8, device="cpu")  # tmp_path holds no head at all
    target, head = pair
    with pytest.raises(ValueError, match="cannot give top-4"):
        LLM.from_models(cpu_backend, target, head.with_vocabulary(torch.tensor([1, 2, 3])),
                        spec=SpecConfig(3, 4, 9))

    class OwnVocabularyHead:  # like EAGLE-3: no with_vocabulary
        pass

    own = OwnVocabularyHead()
    assert restrict(own, tmp_path, "default") is own
    with pytest.raises(UnsupportedModelError, match="its own draft vocabulary"):
        restrict(own, tmp_path, 8)
    for command in ("generate", "bench"):  # argparse's usage error: status 2, one line
        assert main([command, "--draft-vocab", "lots"]) == 2
        err = capsys.readouterr().err
        assert "positive number" in err and "--draft-vocab" in err
    info = DatasetInfo("t", "", 0, 1, 8, 8, (1.0,), (0.0,), 0.95, 0.0)
    dataset = DistillDataset(torch.tensor([1, 2, 99]), torch.tensor([0, 3]), torch.tensor([2]),
                             torch.tensor([False]), torch.zeros(1), info)
    with pytest.raises(ValueError, match="another target"):
        count_answer_tokens(dataset, 50)


def test_moving_a_view_moves_its_rows(pair):
    """``.to(dtype)`` on a view reaches its vocabulary's rows (and the shared modules)."""
    target, _ = pair
    head = tiny_eagle1(target, seed=23)
    view = head.with_vocabulary(torch.tensor([4, 5, 6]))
    view.to(torch.float64)
    assert view._vocab_rows.dtype == torch.float64 and head.fc.weight.dtype == torch.float64
    assert view._vocab_ids.dtype == torch.int64
    torch.testing.assert_close(view._vocab_rows, target.lm_head.weight[[4, 5, 6]].double())
