"""Tests for what ``eagle-hal bench`` measures (eagle_hal.commands.bench_config): modes and
their own settings, the run's settings, the backend's default spec of each kind, and each
mode's draft vocabulary. Oracles: the settings written out by hand and the documented
defaults (``Backend.default_spec``, ``library_default_spec``); nothing is decoded.
"""

from __future__ import annotations

import dataclasses

import pytest
from eagle_hal import select_backend
from eagle_hal.commands import bench


def test_bench_config_rejects_no_timed_run():
    with pytest.raises(ValueError, match="repeats"):
        bench.BenchConfig(repeats=0)


def test_mode_spec_reads_each_modes_own_settings():
    """``kind:S…K…N…`` in any order and case; bad settings name the mode and the rule."""
    assert bench.mode_spec("plain") == ("plain", {})
    assert bench.mode_spec("tree:S8K4N48") == ("tree", {"S": 8, "K": 4, "N": 48})
    assert bench.mode_spec("chain:s5") == ("chain", {"S": 5})
    assert bench.mode_spec("adaptive:N12K3") == ("adaptive", {"N": 12, "K": 3})
    for bad, message in [("tree:", "settings must read"), ("tree:S8x", "settings must read"),
                         ("tree:Q3", "not one of S, K, N"), ("tree:S3S4", "not one of S, K, N"),
                         ("tree:8", "settings must read")]:
        with pytest.raises(ValueError, match=message):
            bench.mode_spec(bad)
    config = bench.BenchConfig(steps=5, topk=4, draft_tokens=16)
    tree = config.spec_for("tree:S8N48")
    assert (tree.num_steps, tree.topk, tree.draft_tokens, tree.adaptive) == (8, 4, 48, False)
    chain = config.spec_for("chain:S3")
    assert (chain.num_steps, chain.topk, chain.draft_tokens) == (3, 1, 4)
    assert config.spec_for("adaptive:K2N8").adaptive
    for bad, message in [(("plain:S2",), "takes no spec"), (("chain:S3K2",), "a chain has K = 1"),
                         (("tree:S2K2N40",), "num_draft_tokens=40"),
                         (("tree:S2", "tree:S2"), "more than once"),
                         (("fast:S2",), "unknown modes")]:
        with pytest.raises(ValueError, match=message):
            bench.BenchConfig(modes=bad)


def test_modes_without_settings_take_the_backends_default_spec_of_their_kind():
    """A mode's own settings, over the run's, over the backend's default spec of its kind
    (the CPU's: chains of S = 3, trees S3 K2 N4, adaptive chains S = 0-3); without
    ``base_specs`` the library's (S = 5 chains, S5 K4 N16 trees). N follows the shape."""
    from eagle_hal.backends.defaults import SPEC_KINDS

    cpu = select_backend("cpu")
    config = bench.BenchConfig(
        modes=("plain", "chain", "tree", "adaptive", "tree:S5"),
        base_specs={kind: cpu.default_spec(kind) for kind in SPEC_KINDS},
    )
    shape = lambda s: (s.num_steps, s.topk, s.draft_tokens, s.adaptive)  # noqa: E731
    assert shape(config.spec_for("chain")) == (3, 1, 4, False)
    assert shape(config.spec_for("tree")) == (3, 2, 4, False)
    assert config.spec_for("adaptive") == cpu.default_spec("adaptive")
    assert shape(config.spec_for("tree:S5")) == (5, 2, 11, False)  # min(2 * 5 + 1, 16)
    wide = dataclasses.replace(config, topk=4)  # --spec-topk 4
    assert shape(wide.spec_for("tree")) == (3, 4, 13, False)
    assert shape(wide.spec_for("chain")) == (3, 1, 4, False)  # K is for trees
    library = bench.BenchConfig()
    assert shape(library.spec_for("chain")) == (5, 1, 6, False)
    assert shape(library.spec_for("tree")) == (5, 4, 16, False)
    assert shape(library.spec_for("adaptive")) == (5, 4, 16, True)
    assert shape(bench.BenchConfig(steps=8).spec_for("tree")) == (8, 4, 16, False)


def test_a_mode_may_name_its_draft_vocabulary():
    """V sets a mode's draft vocabulary; modes without one take the run's; plain takes none."""
    assert bench.mode_spec("chain:S5V8192") == ("chain", {"S": 5, "V": 8192})
    config = bench.BenchConfig(modes=("plain", "chain:S5V8192", "chain:S5"), draft_vocab="full")
    assert config.draft_vocab_for("chain:S5V8192") == 8192
    assert config.draft_vocab_for("chain:S5") == "full"
    assert config.spec_for("chain:S5V8192") == config.spec_for("chain:S5")
    assert bench.BenchConfig(modes=("tree",)).draft_vocab_for("tree") == "auto"
    for bad, message in [(("plain:V8",), "takes no V"), (("chain:V0",), "positive number"),
                         (("tree:K4V3",), "cannot give top-4")]:
        with pytest.raises(ValueError, match=message):
            bench.BenchConfig(modes=bad)
    with pytest.raises(ValueError, match="positive number"):
        bench.BenchConfig(modes=("chain",), draft_vocab="some")
