"""Bad input to ``eagle-hal`` is one line on stderr and the exit status of README's table,
never a traceback; the same values through the Python API raise the typed error.

Every case runs in process (``cli.main``) on tiny files and fails before any model loads,
so the table costs seconds.
"""

from __future__ import annotations

import math

import pytest
from eagle_hal import cli
from eagle_hal.errors import BackendUnavailable, InvalidArgument, InvalidDeviceString

USAGE, BACKEND = cli.EXIT_USAGE, cli.EXIT_BACKEND

GENERATE_NUMBERS = [
    # (flag, value) pairs no run can take
    *[("--max-new-tokens", v) for v in ("0", "-1", "nan", "inf", "1.5", "99999999999")],
    *[("--temperature", v) for v in ("nan", "inf", "-inf", "-0.5", "1e400")],
    *[("--top-p", v) for v in ("0", "2", "nan", "-inf", "-0.1", "inf")],
    *[("--top-k", v) for v in ("-2", "nan", "inf", "99999999999")],
    *[("--seed", v) for v in ("-1", "nan", "1e3")],
    *[("--spec-steps", v) for v in ("-1", "nan")],
    *[("--spec-topk", v) for v in ("0", "-1", "inf")],
    *[("--spec-draft-tokens", v) for v in ("0", "-3")],
    *[("--max-batch-size", v) for v in ("0", "-1")],
    *[("--max-context", v) for v in ("0", "nan")],
    *[("--tp", v) for v in ("0", "-2")],
]
BENCH_NUMBERS = [
    *[("--num-prompts", v) for v in ("0", "-4")],
    *[("--repeats", v) for v in ("0", "nan")],
    *[("--max-new-tokens", v) for v in ("0", "inf")],
    *[("--batch-sizes", v) for v in ("0", "a", ",", "1,-2", "1.5")],
    ("--spec-topk", "0"),
    ("--max-context", "-1"),
]
TRAIN_NUMBERS = [
    ("--num-prompts", "0"), ("--max-new-tokens", "-1"), ("--gen-batch-size", "0"),
    ("--validation-fraction", "0"), ("--validation-fraction", "1"),
    ("--validation-fraction", "nan"), ("--steps", "0"), ("--batch-size", "-1"),
    ("--lr", "0"), ("--lr", "nan"), ("--lr", "inf"), ("--warmup-fraction", "2"),
    ("--feature-noise", "-1"), ("--unroll-steps", "0"), ("--validate-every", "0"),
]
BAD_DEVICES = ["quantum:0", "cpu:1", "cuda:-1", "cuda:01", "", "   ", "cuda:99999", "auto:0",
               "cuda:0:1", "gpu"]


def _files(tmp_path):
    """Prompt files that hold no usable prompt, by name."""
    files = {
        "missing": tmp_path / "missing.txt",
        "empty": tmp_path / "empty.txt",
        "blank": tmp_path / "blank.txt",
        "latin1": tmp_path / "latin1.txt",
        "binary": tmp_path / "binary.txt",
        "folder": tmp_path / "folder",
        "jsonl_garbage": tmp_path / "garbage.jsonl",
        "jsonl_number": tmp_path / "number.jsonl",
        "jsonl_no_turns": tmp_path / "no_turns.jsonl",
        "jsonl_empty_turns": tmp_path / "empty_turns.jsonl",
    }
    files["empty"].write_text("")
    files["blank"].write_text("\n   \n\t\n")
    files["latin1"].write_bytes("caf\xe9\n".encode("latin-1"))
    files["binary"].write_bytes(b"\x00\x01\x02abc\n")
    files["folder"].mkdir()
    files["jsonl_garbage"].write_text("{not json\n")
    files["jsonl_number"].write_text("5\n")
    files["jsonl_no_turns"].write_text('{"question": "hi"}\n')
    files["jsonl_empty_turns"].write_text('{"turns": []}\n')
    return files


def _cases(tmp_path):
    """(argv, exit status, what the one line must name)."""
    files = _files(tmp_path)
    good = tmp_path / "good.txt"
    good.write_text("hello\n")
    cases = []
    for flag, value in GENERATE_NUMBERS:
        cases.append((["generate", "--prompt", "hi", f"{flag}={value}"], USAGE, flag))
    for flag, value in BENCH_NUMBERS:
        cases.append((["bench", "--dataset", str(good), f"{flag}={value}"], USAGE, flag))
    for flag, value in TRAIN_NUMBERS:
        cases.append((["train-draft", f"{flag}={value}"], USAGE, flag))
    for device in BAD_DEVICES:
        cases.append((["generate", "--prompt", "hi", f"--device={device}"], USAGE,
                      repr(device)))
        cases.append((["conformance", f"--device={device}"], USAGE, repr(device)))
    cases.append((["bench", "--dataset", str(good), "--device=quantum"], USAGE, "'quantum'"))
    for name, path in files.items():
        if not name.startswith("jsonl"):
            cases.append((["generate", "--prompts-file", str(path)], USAGE, str(path)))
        cases.append((["bench", "--dataset", str(path)], USAGE, str(path)))
    cases += [
        (["generate", "--bogus"], USAGE, "--bogus"),
        (["generate", "--dtype", "float64"], USAGE, "--dtype"),
        (["generate", "--draft-vocab", "-5"], USAGE, "--draft-vocab"),
        # conflicting speculation settings: a chain (K = 1) verifies S + 1 tokens
        (["generate", "--prompt", "hi", "--device", "cpu", "--spec-steps", "2",
          "--spec-topk", "1", "--spec-draft-tokens", "9"], USAGE, "draft_tokens"),
        (["bench", "--dataset", str(good), "--device", "cpu", "--modes", "fast"], USAGE,
         "fast"),
        (["bench", "--dataset", str(good), "--device", "cpu", "--modes", "plain:S3"], USAGE,
         "plain:S3"),
        (["bench", "--dataset", str(good), "--device", "cpu", "--modes", "chain,chain"], USAGE,
         "chain"),
        (["conformance"], USAGE, "--device"),
        (["conformance", "--device", "cpu", "--areas", "nope"], USAGE, "--areas"),
        (["conformance", "--device", "cpu", "--areas", ","], USAGE, "--areas"),
        (["conformance", "--device", "cpu", "--report", str(tmp_path / "no" / "r.json")],
         USAGE, "--report"),
        (["conformance", "--device", "cpu", "--report", str(files["folder"])], USAGE,
         "--report"),
        (["backends", "--bogus"], USAGE, "--bogus"),
        (["backends", "extra"], USAGE, "extra"),
        (["nosuchcommand"], USAGE, "nosuchcommand"),
        (["generate", "--prompt", "hi", "--device", "cpu", "--backend", "nosuch"], BACKEND,
         "nosuch"),
        (["conformance", "--device", "cpu", "--backend", "nosuch"], BACKEND, "nosuch"),
    ]
    return cases


def _available_kinds() -> set[str]:
    from eagle_hal.registry import list_backends

    return {kind for info in list_backends() if info.available for kind in info.device_types}


def test_the_table_has_enough_cases(tmp_path):
    assert len(_cases(tmp_path)) >= 60


def test_bad_input_is_one_line_and_the_tables_status(tmp_path, capsys, monkeypatch):
    """Each bad input: its exit status, one line on stderr naming the flag or the file, no
    traceback, nothing loaded."""
    monkeypatch.delenv("EAGLE_HAL_DEBUG", raising=False)
    monkeypatch.delenv("EAGLE_HAL_BACKEND", raising=False)
    import eagle_hal.model.loading as loading

    def no_loading(*args, **kwargs):
        raise AssertionError("a bad input got as far as loading a model")

    monkeypatch.setattr(loading, "load_target", no_loading)
    wrong = []
    for argv, status, named in _cases(tmp_path):
        got = cli.main(argv)
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        if got != status or len(lines) != 1 or named not in lines[0] or "Traceback" in err:
            wrong.append((argv, status, got, err))
    assert not wrong, "\n".join(f"{a}: expected {s}, got {g}: {e!r}" for a, s, g, e in wrong)


@pytest.mark.parametrize("device", ["npu:0", "xpu:3", "musa", "cuda:7", "ROCM:1", "hip:0"])
def test_devices_nobody_serves_here_exit_3(device, capsys, monkeypatch):
    """A well-formed device no backend can serve on this host: BackendUnavailable, status 3,
    one line naming the device, before any model loads."""
    monkeypatch.delenv("EAGLE_HAL_BACKEND", raising=False)
    from eagle_hal.device import parse_device

    spec = parse_device(device)
    if spec.kind in _available_kinds():
        pytest.skip(f"{spec.kind} is available here")
    for argv in (["generate", "--prompt", "hi", "--device", device],
                 ["conformance", "--device", device]):
        assert cli.main(argv) == BACKEND
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and str(spec) in lines[0] and "BackendUnavailable" in lines[0]


def test_debug_shows_the_traceback(capsys, monkeypatch):
    """``--debug`` lets the error propagate (traceback and all)."""
    monkeypatch.delenv("EAGLE_HAL_DEBUG", raising=False)
    with pytest.raises(InvalidDeviceString):
        cli.main(["--debug", "generate", "--prompt", "hi", "--device", "quantum"])


# -- the same values through the Python API ------------------------------------------------

SAMPLING_BAD = [
    ("temperature", math.nan), ("temperature", math.inf), ("temperature", -math.inf),
    ("temperature", -0.5), ("temperature", "0.5"), ("top_p", 0.0), ("top_p", 2.0),
    ("top_p", math.nan), ("top_p", -math.inf), ("top_k", -2), ("top_k", 1.5),
    ("top_k", True), ("max_new_tokens", 0), ("max_new_tokens", -1),
    ("max_new_tokens", 2**40), ("max_new_tokens", 2.0), ("seed", -1), ("seed", 1.5),
    ("stop", ("",)), ("stop_token_ids", (-1,)),
]


@pytest.mark.parametrize(("name", "value"), SAMPLING_BAD)
def test_sampling_params_name_the_field(name, value):
    from eagle_hal.engine.request import SamplingParams

    with pytest.raises(InvalidArgument) as caught:
        SamplingParams(**{name: value})
    assert caught.value.name == name and name in str(caught.value)
    assert isinstance(caught.value, ValueError)


LLM_BAD = [
    ("max_batch_size", 0), ("max_batch_size", -1), ("max_context", 0),
    ("max_context", math.nan), ("kv_cache_tokens", 0), ("page_size", 0), ("seed", -3),
    ("graphs", "yes"), ("dtype", "float64"), ("device", 3),
]


@pytest.mark.parametrize(("name", "value"), LLM_BAD)
def test_llm_arguments_fail_before_loading(name, value, monkeypatch):
    """``LLM(...)`` refuses these before any backend is selected or model loaded."""
    import eagle_hal.model.loading as loading
    import eagle_hal.registry as registry
    from eagle_hal.api import LLM
    from eagle_hal.errors import EagleHalError

    def never(*args, **kwargs):
        raise AssertionError("selected or loaded before checking the arguments")

    monkeypatch.setattr(loading, "load_target", never)
    monkeypatch.setattr(registry, "select_backend", never)
    with pytest.raises(EagleHalError) as caught:
        LLM(draft=None, **{name: value})
    assert isinstance(caught.value, ValueError)
    assert name in str(caught.value) or name == "device"


@pytest.mark.parametrize("device", BAD_DEVICES)
def test_llm_bad_device_strings(device):
    from eagle_hal.api import LLM

    with pytest.raises(InvalidDeviceString):
        LLM(draft=None, device=device)


@pytest.mark.parametrize("device", ["npu:0", "xpu:3", "musa"])
def test_llm_unserved_devices(device):
    from eagle_hal.api import LLM
    from eagle_hal.device import parse_device

    if parse_device(device).kind in _available_kinds():
        pytest.skip("available here")
    with pytest.raises(BackendUnavailable):
        LLM(draft=None, device=device)


def test_the_prompt_set_errors_are_typed(tmp_path):
    from eagle_hal.commands.bench_prompts import DatasetError, load_prompts
    from eagle_hal.errors import EagleHalError

    for path in _files(tmp_path).values():
        with pytest.raises(DatasetError) as caught:
            load_prompts(str(path), 4, flag="--prompts-file")
        assert isinstance(caught.value, EagleHalError) and str(path) in str(caught.value)


def test_model_and_head_files_that_cannot_load_exit_2(tmp_path, capsys, monkeypatch):
    """A ``--model`` or ``--draft`` that is missing, lacks its config or holds garbage: exit
    status 2 (bad input), one line naming the path, no traceback."""
    monkeypatch.delenv("EAGLE_HAL_DEBUG", raising=False)
    empty = tmp_path / "empty"
    empty.mkdir()
    garbage = tmp_path / "garbage.gguf"
    garbage.write_bytes(b"not a gguf file at all")
    bad_head = tmp_path / "head"
    bad_head.mkdir()
    (bad_head / "config.json").write_text("[1, 2")
    base = ["generate", "--device", "cpu", "--prompt", "hi", "--max-new-tokens", "2"]
    cases = [
        ([*base, "--model", str(tmp_path / "nothing-here"), "--draft", "none"],
         "nothing-here"),
        ([*base, "--model", str(empty), "--draft", "none"], "empty"),
        ([*base, "--model", str(garbage), "--draft", "none"], "garbage.gguf"),
        ([*base, "--draft", str(tmp_path / "no-head")], "no-head"),
        ([*base, "--draft", str(bad_head)], "config.json"),
    ]
    for argv, named in cases:
        assert cli.main(argv) == USAGE, argv
        err = capsys.readouterr().err
        lines = err.strip().splitlines()
        assert len(lines) == 1 and named in lines[0] and "Traceback" not in err, (argv, err)


def test_layer_errors_join_the_family():
    from eagle_hal.commands.bench_prompts import DatasetError
    from eagle_hal.engine.page_allocator import ContextTooLong
    from eagle_hal.errors import EagleHalError
    from eagle_hal.hal.sampling import TreeConfigError

    for error in (DatasetError, ContextTooLong, TreeConfigError, InvalidArgument):
        assert issubclass(error, EagleHalError) and issubclass(error, ValueError)
    assert cli.exit_status(InvalidArgument("x", 1, "y")) == USAGE
    assert cli.exit_status(BackendUnavailable("none")) == BACKEND
    assert cli.exit_status(RuntimeError("bug")) == cli.EXIT_FAILURE


# -- every device string the parser accepts works end to end, or is BackendUnavailable -----

def _accepted_device_strings():
    from eagle_hal.device import KIND_TO_TORCH_TYPE
    from hypothesis import strategies as st

    def spell(kind: str, index: int | None, pad_left: str, pad_right: str, upper: list[bool]):
        cased = "".join(c.upper() if u else c for c, u in zip(kind, upper, strict=False))
        cased += kind[len(upper):]
        return f"{pad_left}{cased}{'' if index is None else f':{index}'}{pad_right}"

    kinds = st.sampled_from(sorted(KIND_TO_TORCH_TYPE))
    pads = st.sampled_from(["", " ", "\t", "  "])
    indexed = st.builds(spell, kinds, st.one_of(st.none(), st.integers(0, 9),
                                                 st.integers(0, 1023)),
                        pads, pads, st.lists(st.booleans(), max_size=4))
    auto = st.builds(spell, st.just("auto"), st.none(), pads, pads,
                     st.lists(st.booleans(), max_size=4))
    return st.one_of(indexed, auto)


def _accepts(text: str) -> bool:
    from eagle_hal.device import parse_device

    try:
        parse_device(text)
    except InvalidDeviceString:
        return False
    return True


def test_every_accepted_device_string_builds_an_llm_or_is_unavailable(monkeypatch):
    """``LLM(device=...)`` on a tiny synthetic model, for device strings ``parse_device``
    accepts: it builds, or raises ``BackendUnavailable``; never another exception (such as
    a mismatch between the string and the backend selected for it)."""
    import eagle_hal.model.loading as loading
    from eagle_hal.api import LLM
    from eagle_hal.registry import select_backend
    from eagle_hal.testing.models import tiny_target
    from hypothesis import HealthCheck, example, given, settings

    monkeypatch.delenv("EAGLE_HAL_BACKEND", raising=False)

    def tiny(model, *, dtype, device, progress):
        return tiny_target(seed=1, device=device).to(dtype), None

    monkeypatch.setattr(loading, "load_target", tiny)

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.filter_too_much])
    @given(_accepted_device_strings().filter(_accepts))
    @example("cpu:0")
    @example("CPU")
    @example(" cpu")
    @example("CUDA:0")
    @example("rocm:0")
    @example("hip:0")
    @example("cuda:7")
    @example("Auto")
    def check(device: str) -> None:
        # as the Python API is called, then as generate and bench call it: the backend
        # selected for the string, passed with the same string
        try:
            llm = LLM(model="tiny", draft=None, device=device, max_batch_size=2,
                      max_context=32, progress=False, graphs=False)
            assert llm.backend.torch_device.type in {"cpu", "cuda", "npu", "xpu", "musa"}
            again = LLM(model="tiny", draft=None, device=device,
                        backend=select_backend(device), max_batch_size=2, max_context=32,
                        progress=False, graphs=False)
            assert again.backend.torch_device == llm.backend.torch_device
        except BackendUnavailable:
            return

    check()


@pytest.mark.parametrize(("prompts", "params", "name"), [
    ([], None, "prompts"),
    ([[]], None, "prompt"),
    ([[1, 2, -1]], None, "prompt"),
    ([[1, 2, 97]], None, "prompt"),
    ([[1, True]], None, "prompt"),
    ("text without a tokenizer", None, "prompt"),
    (5, None, "prompts"),
    ([[1, 2], [3, 4]], ["not params", "x"], "params"),
    ([[1, 2], [3, 4]], [None], "params"),
])
def test_generate_refuses_bad_prompts_with_a_typed_error(prompts, params, name):
    """``LLM.generate`` on a tiny synthetic model: a prompt or params it cannot take raise
    ``InvalidArgument`` naming the argument, and nothing runs."""
    from eagle_hal.api import LLM
    from eagle_hal.registry import select_backend
    from eagle_hal.testing.models import tiny_target

    llm = LLM.from_models(select_backend("cpu"), tiny_target(seed=1), None, max_batch_size=2,
                          max_context=32)
    with pytest.raises(InvalidArgument) as caught:
        llm.generate(prompts, params)
    assert caught.value.name == name
    assert llm.used_pages == 0
