"""The conformance suite itself: green on the cpu backend, the example third-party plugin
and the Triton ops (TRITON_INTERPRET=1), and in the graphs area with the strict emulated
capture of ``eagle_hal.testing.graphs``; red in the right area, with a message naming the
fault, on deliberately broken backends; honest about known failures; inert unless asked.

The oracle for "broken" is the planted fault: each double differs from a correct backend
in exactly one place, and the suite must fail exactly the checks that exercise it.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
from pathlib import Path

import pytest
import torch
from eagle_hal.backends.cpu.backend import CpuBackend
from eagle_hal.backends.cpu.plugin import CAPABILITIES, DESCRIPTOR
from eagle_hal.conformance import Outcome, run_suite
from eagle_hal.device import parse_device
from eagle_hal.engine.graphs import runner as graph_runner
from eagle_hal.engine.graphs.runner import GraphRunner
from eagle_hal.ops.attention_reference import TorchAttentionBackend
from eagle_hal.ops.reference import ReferenceSamplingOps
from eagle_hal.testing.graphs import EmulatedGraphCapture

FAST_AREAS = ["discovery", "sampling", "model_kernels", "attention", "kv", "graphs"]
EXAMPLE_SRC = Path(__file__).resolve().parents[3] / "examples" / "third-party-backend" / "src"


def _failures(report, area=None):
    return [r for r in report.results if r.outcome.is_failure and (area is None or r.area == area)]


# -- doubles -------------------------------------------------------------------------------


class GreedyOneTooMany(ReferenceSamplingOps):
    """verify_greedy accepts one more node than the target agreed to (when there is room)."""

    def verify_greedy(self, tokens, next_token, next_sibling, predict, num_steps):
        result = super().verify_greedy(tokens, next_token, next_sibling, predict, num_steps)
        return result._replace(accept_lens=torch.clamp(result.accept_lens + 1, max=num_steps + 1))


class MaskBlindAttention(TorchAttentionBackend):
    """Verify attention that ignores the tree mask: every tree node sees every other."""

    def plan(self, batch):
        if batch.tree_mask is not None:
            batch.tree_mask = torch.ones_like(batch.tree_mask, dtype=torch.bool)
        return super().plan(batch)


class RebindingReplayAttention(TorchAttentionBackend):
    """A replay hook that re-plans into new tensors and rebinds the metadata's fields,
    instead of copying into the captured ones."""

    def plan_for_replay(self, batch, metadata):
        fresh = self.plan_for_capture(batch)
        for field in dataclasses.fields(fresh):
            setattr(metadata, field.name, getattr(fresh, field.name))


class OneForwardPerGraphAttention(TorchAttentionBackend):
    """The reference attention, not declaring that several forwards may share a graph."""

    multi_forward_graphs = False


class PaddingIntoRealSlot(GraphRunner):
    """Padded rows write their K/V into page 1 (the first page a request gets) instead of
    the padding page."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.pad_slot = self.runner.layout.page_size


class ReplaySlicingTheTail(GraphRunner):
    """A replay that returns the last rows of the bucket's outputs, ignoring the padding."""

    def _replay(self, entry, batch, hidden, attn):
        super()._replay(entry, batch, hidden, attn)
        return tuple(out[out.shape[0] - batch.num_tokens :].clone() for out in entry.outputs)


def logits_of_the_first_row(x, weight):
    """An lm_head product that gives every row the first row's logits."""
    return torch.nn.functional.linear(x[:1], weight).expand(x.shape[0], -1).contiguous()


class BrokenCpu(CpuBackend):
    def __init__(self, ops=None, attention=None, known=None, caps=CAPABILITIES, graphs=False,
                 kernels=None):
        super().__init__(DESCRIPTOR, parse_device("cpu"))
        self._ops, self._attention, self._known, self._caps = ops, attention, known or {}, caps
        self._graphs, self._kernels = graphs, kernels
        if graphs:
            self._caps = dataclasses.replace(caps, graph_capture=True)

    @property
    def capabilities(self):
        return self._caps

    def sampling_ops(self):
        return self._ops or super().sampling_ops()

    def model_kernels(self):
        return self._kernels or super().model_kernels()

    def create_attention_backend(self, config):
        return (self._attention(config) if self._attention
                else super().create_attention_backend(config))

    def known_failures(self):
        return dict(self._known)

    def graph_capture(self):
        return EmulatedGraphCapture() if self._graphs else None


# -- green ---------------------------------------------------------------------------------


def test_cpu_backend_passes_fast_areas():
    """The cpu backend passes discovery, sampling, model kernels, attention, kv; graphs skip
    with a reason."""
    report = run_suite("cpu", areas=FAST_AREAS)
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.area_status("graphs") == "skip"
    assert all("graph capture" in r.message for r in report.results if r.area == "graphs")
    assert (report.environment["backend"] == "cpu"
            and report.environment["torch"] == torch.__version__)


@pytest.mark.slow
def test_cpu_backend_passes_end_to_end_and_soak():
    """The cpu backend passes the end-to-end and soak areas."""
    report = run_suite("cpu", areas=["end_to_end", "soak"])
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.counts()["pass"] == len(report.results) > 0


def test_example_plugin_passes(monkeypatch):
    """examples/third-party-backend, loaded from its plugin module, passes; the layouts it
    does not accept are skipped with that reason."""
    monkeypatch.syspath_prepend(str(EXAMPLE_SRC))
    report = run_suite("cpu", "example", plugin_module="eagle_hal_example.plugin", areas=FAST_AREAS)
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.environment["backend"] == "example"
    skipped = [r for r in report.results
               if r.outcome is Outcome.SKIP and "target_verify-full" in r.check_id]
    assert skipped and all("does not accept tree-mask layout 'full'" in r.message for r in skipped)


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" or importlib.util.find_spec("triton") is None,
    reason="needs triton and TRITON_INTERPRET=1 to run the kernels on the CPU",
)
def test_triton_ops_pass_sampling_area():
    """TritonSamplingOps (interpreted on the CPU) pass the whole sampling area."""
    from eagle_hal.ops.triton import TritonSamplingOps

    # The two 8000-row statistical checks take minutes in the interpreter; on a GPU they run.
    report = run_suite("cpu", backend=BrokenCpu(ops=TritonSamplingOps()), areas=["sampling"],
                       extra_args=["-k", "not lossless"])
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.counts("sampling")["pass"] > 40


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" or importlib.util.find_spec("triton") is None,
    reason="needs triton and TRITON_INTERPRET=1 to run the kernels on the CPU",
)
def test_triton_model_kernels_pass_model_kernels_area():
    """The Triton ModelKernels (interpreted on the CPU), fused projections and softmax
    top-k included, pass the model kernels area in float32; only logits (not supplied)
    skip. (The interpreter rounds float32 to bfloat16 toward zero, several ulps apart from
    the oracle after the fused epilogues' four roundings: bfloat16 runs on a GPU.)"""
    from eagle_hal.ops.triton.model_kernels import TRITON_MODEL_KERNELS

    report = run_suite("cpu", backend=BrokenCpu(kernels=TRITON_MODEL_KERNELS),
                       areas=["model_kernels"], extra_args=["-k", "float32"])
    assert not report.failed, [r.message for r in _failures(report)]
    skipped = [r for r in report.results if r.outcome is Outcome.SKIP]
    assert skipped and all("/logits[" in r.check_id for r in skipped), [r.check_id for r in skipped]
    assert all("has no logits" in r.message for r in skipped)
    assert report.counts("model_kernels")["pass"] > 20


def test_logits_of_the_wrong_rows_fail_model_kernels_only():
    """A logits kernel that repeats the first row fails test_logits at more than one row,
    and nothing else in the area."""
    kernels = dataclasses.replace(CpuBackend(DESCRIPTOR, parse_device("cpu")).model_kernels(),
                                  logits=logits_of_the_first_row)
    report = run_suite("cpu", backend=BrokenCpu(kernels=kernels), areas=["model_kernels"])
    failed = _failures(report)
    assert failed and all("logits" in r.check_id for r in failed)
    assert {r.check_id.split("[")[1].split("-")[0] for r in failed} == {"2", "6", "16", "40"}
    assert all("entries outside" in r.message for r in failed)


def test_reference_attention_passes_graphs_with_emulated_capture():
    """The reference attention's graph hooks pass the graphs area under the strict
    emulated capture (a replay sees only in-place updates)."""
    report = run_suite("cpu", backend=BrokenCpu(graphs=True), areas=["graphs"])
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.counts("graphs")["pass"] == 11
    # several prompts at once prefill eagerly with this attention
    assert [r.check_id for r in report.results if r.outcome is Outcome.SKIP] == [
        "graphs/ragged_prefills_equal_plain"]


@pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1" or importlib.util.find_spec("triton") is None,
    reason="needs triton and TRITON_INTERPRET=1 to run the kernels on the CPU",
)
def test_triton_attention_passes_graphs_with_emulated_capture():
    """The Triton attention (interpreted) passes the graphs area under the strict emulated
    capture, as GraphRunner drives it (the H200 failure came from the check's driving),
    buckets and padding included. Greedy decoding with graphs, and with prefills from
    token bucket graphs, one prompt or several, is left out here (slow when interpreted;
    tests/core/engine/test_graph_runner.py decodes through them)."""
    from eagle_hal.ops.triton.attention import TritonAttentionBackend

    report = run_suite("cpu", backend=BrokenCpu(attention=TritonAttentionBackend, graphs=True),
                       areas=["graphs"],
                       extra_args=["-k", "not graph_decoding and not prefills_padded "
                                         "and not ragged_prefills"])
    assert not report.failed, [r.message for r in _failures(report)]
    assert report.counts("graphs")["pass"] == 8


def test_required_page_size_is_checked():
    """A backend that requires 128-slot pages (as Ascend's kernels do) gets page128 checks
    in the attention and kv areas, and passes them; other sizes skip."""
    caps = dataclasses.replace(CAPABILITIES, page_sizes=(128,))
    report = run_suite("cpu", backend=BrokenCpu(caps=caps), areas=["attention", "kv"],
                       extra_args=["-k", "page128 or page16"])
    assert not report.failed, [r.message for r in _failures(report)]
    passed = [r.check_id for r in report.results if r.outcome is Outcome.PASS]
    assert passed and all("page128" in c for c in passed)
    assert any(c.startswith("kv/") for c in passed)
    assert all(r.outcome is Outcome.SKIP for r in report.results if "page16" in r.check_id)


# -- red in the right place ----------------------------------------------------------------


def test_verify_accepting_one_too_many_fails_sampling():
    """A verify_greedy that accepts one extra token fails exactly its checks, naming it."""
    report = run_suite("cpu", backend=BrokenCpu(ops=GreedyOneTooMany()), areas=["sampling"])
    failed = _failures(report)
    assert report.failed and failed
    assert all("verify_greedy" in r.check_id for r in failed), [r.check_id for r in failed]
    assert any("verify_greedy: accept_lens" in r.message
               and "differ from the reference" in r.message
               for r in failed)
    assert any(r.check_id.startswith("sampling/golden_verify_greedy") for r in failed)


def test_attention_ignoring_tree_mask_fails_verify_only():
    """Attention blind to the tree mask fails target_verify checks only, saying so."""
    report = run_suite("cpu", backend=BrokenCpu(attention=MaskBlindAttention), areas=["attention"])
    failed = _failures(report)
    assert failed and all("target_verify" in r.check_id
                          for r in failed), [r.check_id for r in failed]
    assert all("attention target_verify" in r.message and "outside atol" in r.message
               for r in failed)
    passed = {r.check_id for r in report.results if r.outcome is Outcome.PASS}
    assert any("draft_decode" in c for c in passed) and any("[extend" in c for c in passed)


def test_replay_hook_rebinding_metadata_fails_graphs():
    """A replay hook that rebinds metadata fields (unseen by a captured graph) fails every
    graphs check at its first replay, the engine's GraphRunner too."""
    report = run_suite("cpu", backend=BrokenCpu(attention=RebindingReplayAttention, graphs=True),
                       areas=["graphs"])
    failed = {r.check_id: r.message for r in _failures(report)}
    assert len(failed) == 11 and all(c.startswith("graphs/") for c in failed)
    hooks = [m for c, m in failed.items() if "replay_equals_eager" in c]
    assert len(hooks) == 3 and all("graph replay 0 of" in m and "outside atol" in m for m in hooks)
    assert all("batch of 1 in bucket 1: hidden states [T, H] vs eager" in m
               for c, m in failed.items() if "bucketed" in c)
    assert "chain draft S=3, batch of 1 in bucket 1" in failed["graphs/chain_loop_equals_eager"]


def test_chain_loop_check_skips_without_multi_forward_graphs():
    """An attention without multi_forward_graphs skips the chain-loop check, saying why;
    chain decoding (step by step, one graph per step) still passes."""
    report = run_suite("cpu", backend=BrokenCpu(attention=OneForwardPerGraphAttention, graphs=True),
                       areas=["graphs"], extra_args=["-k", "chain"])
    outcomes = {r.check_id: (r.outcome, r.message) for r in report.results}
    outcome, message = outcomes["graphs/chain_loop_equals_eager"]
    assert outcome is Outcome.SKIP and "does not declare multi_forward_graphs" in message
    assert outcomes["graphs/graph_decoding_equals_plain[chain-S3]"][0] is Outcome.PASS
    assert not report.failed


def test_padding_into_a_real_slot_fails_graphs(monkeypatch):
    """A graph runner whose padded rows write into a real request's page fails the bucketed
    checks, naming the slot and the request that holds it."""
    monkeypatch.setattr(graph_runner, "GraphRunner", PaddingIntoRealSlot)
    report = run_suite("cpu", backend=BrokenCpu(graphs=True), areas=["graphs"],
                       extra_args=["-k", "bucketed"])
    failed = _failures(report)
    assert len(failed) == 3 and all("bucketed_forwards" in r.check_id for r in failed)
    assert all("outside the batch's out_cache_loc and the padding page changed; first slot 1 "
               "(page 1, position 0 of request row 0)" in r.message
               for r in failed), [r.message for r in failed]


def test_replay_ignoring_the_padding_fails_graphs(monkeypatch):
    """A replay that slices the padded rows instead of the real ones fails the bucketed and
    decoding checks at the first padded batch; full buckets pass."""
    monkeypatch.setattr(graph_runner, "GraphRunner", ReplaySlicingTheTail)
    report = run_suite("cpu", backend=BrokenCpu(graphs=True), areas=["graphs"])
    failed = {r.check_id: r.message for r in _failures(report)}
    assert {c for c in failed if "bucketed_forwards" in c} == {
        f"graphs/bucketed_forwards_equal_eager[{m}]"
        for m in ("draft_decode", "target_verify", "draft_extend")
    }
    assert all("batch of 2 in bucket 4 (padded)" in m and "vs eager" in m
               for c, m in failed.items() if "bucketed" in c), failed
    assert any("graph_decoding" in c and "differs from plain decoding" in m
               for c, m in failed.items())
    assert report.counts("graphs")["pass"] >= 3  # the attention-hook checks use no GraphRunner


def test_known_failures_expected_and_unexpected_pass():
    """A declared known failure that fails is expected; one that passes fails the run."""
    known = {"sampling/*verify_greedy*": "fused verify kernel off by one (tracked)"}
    broken = run_suite("cpu", backend=BrokenCpu(ops=GreedyOneTooMany(), known=known),
                       areas=["sampling"])
    assert not broken.failed
    expected = [r for r in broken.results if r.outcome is Outcome.EXPECTED_FAIL]
    assert expected and all("off by one" in r.message for r in expected)
    fixed = run_suite("cpu", backend=BrokenCpu(known=known), areas=["sampling"])
    unexpected = [r for r in fixed.results if r.outcome is Outcome.UNEXPECTED_PASS]
    assert fixed.failed and unexpected and all("verify_greedy" in r.check_id for r in unexpected)


def test_capability_gating_skips_with_reason():
    """A backend declaring only the tree-block layout and page size 16 skips the rest."""
    import dataclasses

    caps = dataclasses.replace(CAPABILITIES, tree_mask_modes=("tree_block",), page_sizes=(16,))
    report = run_suite("cpu", backend=BrokenCpu(caps=caps), areas=["attention"])
    assert not report.failed
    skips = {r.check_id: r.message for r in report.results if r.outcome is Outcome.SKIP}
    assert any("page1" in c for c in skips) and any("bit_packed" in c for c in skips)
    # the window and soft-cap checks take page 16 where the backend offers it, unnamed
    paged = [r for r in report.results if r.outcome is Outcome.PASS
             and "window" not in r.check_id and "softcap" not in r.check_id]
    assert paged and all("page16" in r.check_id for r in paged)


# -- the command, the report, inertness ----------------------------------------------------


def test_cli_writes_report(tmp_path, capsys):
    """`eagle-hal conformance` exits 0 when green and writes JSON plus a Markdown table."""
    from eagle_hal.cli import main

    path = tmp_path / "cpu.json"
    assert main(["conformance", "--device", "cpu", "--areas", "discovery",
                 "--report", str(path)]) == 0
    data = json.loads(path.read_text())
    assert data["passed"] is True and data["areas"]["discovery"]["pass"] == 5
    assert data["environment"]["backend"] == "cpu"
    assert "| discovery | ok | 5 |" in path.with_suffix(".md").read_text()
    assert "RESULT: PASSED" in capsys.readouterr().out


def test_cli_exit_status_on_failure(monkeypatch):
    """A failing check makes the command exit non-zero."""
    from eagle_hal.cli import main

    monkeypatch.setattr(CpuBackend, "sampling_ops", lambda self: GreedyOneTooMany())
    assert main(["conformance", "--device", "cpu", "--areas", "sampling"]) == 1


def test_plugin_is_inert_without_option(tmp_path):
    """Without --eagle-hal-device the plugin registers nothing and collects no checks."""
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    seen = {}

    class Probe:
        def pytest_sessionfinish(self, session):
            manager = session.config.pluginmanager
            seen["session"] = manager.get_plugin("eagle_hal_conformance_session")
            seen["entry"] = manager.get_plugin("eagle_hal_conformance")
            seen["collected"] = session.testscollected

    status = pytest.main([str(tmp_path), "-c", os.devnull, "-q", "-p", "no:cacheprovider"],
                         plugins=[Probe()])
    assert status == 0
    assert seen["entry"] is not None and seen["session"] is None and seen["collected"] == 1
