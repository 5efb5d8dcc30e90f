"""The settings table: every environment variable the product reads is declared once, read
only through ``eagle_hal.settings``, parsed by its type, and documented in the README."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from eagle_hal import settings
from eagle_hal.cli import main
from eagle_hal.errors import InvalidSetting

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = [ROOT / "core" / "src", *sorted((ROOT / "backends").glob("*/src"))]
SETTINGS_MODULE = ROOT / "core" / "src" / "eagle_hal" / "settings.py"


def _product_modules():
    for top in PRODUCT:
        for path in sorted(top.rglob("*.py")):
            yield path, ast.parse(path.read_text(), filename=str(path))


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "LITERAL"`` assignments (``ENV_PLUGINS = "EAGLE_HAL_PLUGINS"``)."""
    found = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) \
                and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node.value.value
    return found


def test_no_product_module_reads_the_environment_but_the_settings_module():
    """``os.environ``, ``os.getenv`` and ``os.putenv`` appear in no module of core or a
    backend package except ``eagle_hal.settings`` (an AST walk, so docstrings that name
    ``os.environ`` do not count)."""
    offenders = []
    for path, tree in _product_modules():
        if path == SETTINGS_MODULE:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv", "putenv") \
                    and isinstance(node.value, ast.Name) and node.value.id == "os":
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
            if isinstance(node, ast.ImportFrom) and node.module == "os" \
                    and any(a.name in ("environ", "getenv") for a in node.names):
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not offenders, offenders


def test_every_name_the_product_reads_is_declared():
    """Each ``settings.get(NAME)`` in core and the backends names a declared variable (a
    literal or a module-level string constant); the walk finds the reads it checks."""
    declared = {s.name for s in settings.declared()}
    read, unresolved = set(), []
    for path, tree in _product_modules():
        if not any(isinstance(n, ast.ImportFrom) and n.module == "eagle_hal"
                   and any(a.name == "settings" for a in n.names) for n in ast.walk(tree)):
            continue  # ``settings`` is some other name there (a tokenizer's settings)
        constants = _string_constants(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "get" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "settings" and node.args):
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                read.add(arg.value)
            elif isinstance(arg, ast.Name) and arg.id in constants:
                read.add(constants[arg.id])
            else:  # a name computed at run time (a probe's variable): declared by the probe
                unresolved.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert {"EAGLE_HAL_BACKEND", "EAGLE_HAL_PLUGINS", "EAGLE_HAL_DEBUG"} <= read
    assert read <= declared, sorted(read - declared)
    assert len(unresolved) <= 3, unresolved  # the generic probes only


def test_the_readme_table_is_the_declared_table():
    """The README's settings table, between its markers, is ``markdown_table()`` (regenerate
    it with ``python -m eagle_hal.settings``)."""
    readme = (ROOT / "README.md").read_text()
    found = re.search(r"<!-- settings-table:begin -->\n(.*?)\n<!-- settings-table:end -->",
                      readme, re.S)
    assert found, "README.md lacks the settings-table markers"
    assert found.group(1).strip() == settings.markdown_table()


@pytest.mark.parametrize("value,expected", [
    ("1", True), ("true", True), (" ON ", True), ("Yes", True),
    ("0", False), ("false", False), ("off", False), ("NO", False), ("", False), (None, False),
])
def test_a_bool_takes_the_usual_spellings(value, expected):
    environ = {} if value is None else {"EAGLE_HAL_DEBUG": value}
    assert settings.get("EAGLE_HAL_DEBUG", environ) is expected


def test_a_value_the_type_does_not_allow_names_variable_value_and_what_is_allowed():
    with pytest.raises(InvalidSetting) as bool_error:
        settings.get("EAGLE_HAL_DEBUG", {"EAGLE_HAL_DEBUG": "maybe"})
    assert "EAGLE_HAL_DEBUG='maybe'" in str(bool_error.value) and "yes" in str(bool_error.value)
    with pytest.raises(InvalidSetting, match=r"EAGLE_HAL_ROCM_WAVEFRONT_SIZE='48'.*32 or 64"):
        settings.get("EAGLE_HAL_ROCM_WAVEFRONT_SIZE", {"EAGLE_HAL_ROCM_WAVEFRONT_SIZE": "48"})
    with pytest.raises(InvalidSetting, match="32 or 64"):
        settings.get("EAGLE_HAL_ROCM_WAVEFRONT_SIZE", {"EAGLE_HAL_ROCM_WAVEFRONT_SIZE": "x"})
    assert isinstance(bool_error.value, ValueError)


def test_ints_lists_and_strings_parse_by_their_type():
    assert settings.get("EAGLE_HAL_ROCM_WAVEFRONT_SIZE", {}) is None
    assert settings.get("EAGLE_HAL_ROCM_WAVEFRONT_SIZE",
                        {"EAGLE_HAL_ROCM_WAVEFRONT_SIZE": " 32 "}) == 32
    assert settings.get("EAGLE_HAL_PLUGINS", {"EAGLE_HAL_PLUGINS": " cuda, ,cpu "}) == \
        ("cuda", "cpu")
    assert settings.get("EAGLE_HAL_PLUGINS", {}) == ()
    # an empty CUDA_VISIBLE_DEVICES hides every GPU: it stays empty, unlike unset
    assert settings.get("CUDA_VISIBLE_DEVICES", {"CUDA_VISIBLE_DEVICES": ""}) == ""
    assert settings.get("CUDA_VISIBLE_DEVICES", {}) is None


def test_reads_happen_when_asked_so_the_environment_of_the_moment_counts(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert settings.triton_interpreted()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert not settings.triton_interpreted()


def test_an_undeclared_name_is_a_programming_error():
    with pytest.raises(settings.UnknownSetting, match="EAGLE_HAL_NO_SUCH"):
        settings.get("EAGLE_HAL_NO_SUCH")


def test_a_plugin_declares_its_own_and_cannot_redeclare_another(monkeypatch):
    monkeypatch.setattr(settings, "_declared", dict(settings._declared))
    mine = settings.Setting("EAGLE_HAL_TESTVENDOR_FAST", settings.BOOL, False,
                            "a test vendor's switch", "eagle-hal-testvendor")
    assert settings.declare(mine) is mine and settings.declare(mine) is mine
    assert settings.get("EAGLE_HAL_TESTVENDOR_FAST", {"EAGLE_HAL_TESTVENDOR_FAST": "1"})
    with pytest.raises(ValueError, match="already declared"):
        settings.declare(settings.Setting("EAGLE_HAL_DEBUG", settings.BOOL, True, "other",
                                          "eagle-hal-testvendor"))


def test_errors_are_one_line_unless_debugging(monkeypatch, capsys):
    """A user error is one line on stderr (status 2, a bad device string); EAGLE_HAL_DEBUG=1
    lets it raise with its traceback; a value EAGLE_HAL_DEBUG does not allow is reported and
    counts as off."""
    argv = ["generate", "--device", "quantum:0", "--prompt", "hi"]
    monkeypatch.delenv("EAGLE_HAL_DEBUG", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "quantum:0" in err and "Traceback" not in err
    monkeypatch.setenv("EAGLE_HAL_DEBUG", "1")
    with pytest.raises(ValueError, match="quantum:0"):
        main(argv)
    monkeypatch.setenv("EAGLE_HAL_DEBUG", "maybe")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "EAGLE_HAL_DEBUG='maybe'" in err and "quantum:0" in err
