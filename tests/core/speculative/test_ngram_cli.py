"""``--draft ngram[:N,K]`` and the bench's ``ngram`` mode: parsed before anything loads."""

from __future__ import annotations

import pytest
from eagle_hal import cli
from eagle_hal.commands.bench_config import BenchConfig


def status_of(argv: list[str]) -> int:
    try:
        return cli.main(argv)
    except SystemExit as exit:
        return exit.code


@pytest.mark.parametrize("value", ["ngram:0", "ngram:3,0", "ngram:3,x", "ngram:1,2,3"])
def test_generate_refuses_a_bad_ngram_draft(value, capsys):
    assert status_of(["generate", "--draft", value, "--device", "cpu"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err
    assert "--draft" in err and value in err


def test_bench_ngram_modes():
    config = BenchConfig(modes=("plain", "ngram", "ngram:S4K2M2"))
    chain, tree = config.spec_for("ngram"), config.spec_for("ngram:S4K2M2")
    assert chain.topk == 1 and chain.draft_tokens == chain.num_steps + 1
    assert (tree.num_steps, tree.topk) == (4, 2)
    assert config.ngram_for("ngram") == (3, 1) and config.ngram_for("ngram:S4K2M2") == (2, 2)
    assert config.draft_vocab_for("ngram") == "full"


@pytest.mark.parametrize("mode", ["ngram:M0", "ngram:V100", "chain:M2", "ngram:K99"])
def test_bench_refuses_bad_ngram_modes(mode):
    with pytest.raises(ValueError):
        BenchConfig(modes=(mode,))


def test_bench_measures_an_ngram_mode_without_a_head():
    from eagle_hal import select_backend
    from eagle_hal.commands.bench import benchmark
    from eagle_hal.testing.models import near_bigram_target

    target = near_bigram_target(seed=5)
    prompts = [[5, 9, 13, 2, 7, 5, 9, 13, 2, 7, 5, 9], [3, 4, 3, 4, 3, 4, 3]]
    config = BenchConfig(modes=("plain", "ngram:S3K2M3", "chain"), max_new_tokens=24,
                         repeats=1, graphs=False, split_timing=False)
    rows = benchmark(select_backend("cpu"), target, None, prompts, config, max_context=256)
    by_mode = {row["mode"]: row for row in rows}
    assert set(by_mode) == {"plain", "ngram:S3K2M3"}  # chain needs a head: skipped
    ngram = by_mode["ngram:S3K2M3"]
    assert ngram["same_as_plain"] and ngram["accept_length"] > 1.2
    assert ngram["spec"]["topk"] == 2
