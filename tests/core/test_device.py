"""Tests for eagle_hal.device: every accepted form parses, a wide range of others raise.

The oracle is an explicit enumeration of the documented accepted strings, written out
here independently of the parser's regular expression.
"""

from __future__ import annotations

import pytest
from eagle_hal.device import MAX_DEVICE_INDEX, DeviceSpec, parse_device
from eagle_hal.errors import InvalidDeviceString
from hypothesis import example, given, settings
from hypothesis import strategies as st

# The documented table, restated: kind -> torch device type.
TORCH_TYPE = {
    "cuda": "cuda",
    "rocm": "cuda",
    "hip": "cuda",
    "npu": "npu",
    "xpu": "xpu",
    "musa": "musa",
}
INDEXED_KINDS = tuple(TORCH_TYPE)


def _valid_strings() -> dict[str, tuple[str, str | None, int | None]]:
    """Every accepted normalised string -> (kind, torch_type, index)."""
    valid: dict[str, tuple[str, str | None, int | None]] = {
        "cpu": ("cpu", "cpu", None),
        "cpu:0": ("cpu", "cpu", 0),
        "auto": ("auto", None, None),
    }
    for kind in INDEXED_KINDS:
        valid[kind] = (kind, TORCH_TYPE[kind], None)
        for index in range(MAX_DEVICE_INDEX):
            valid[f"{kind}:{index}"] = (kind, TORCH_TYPE[kind], index)
    return valid


VALID = _valid_strings()
WHITESPACE = st.sampled_from(["", " ", "\t", "\n", "  \t "])


def _check_against_oracle(text: str) -> None:
    expected = VALID.get(text.strip().lower())
    if expected is None:
        with pytest.raises(InvalidDeviceString):
            parse_device(text)
    else:
        spec = parse_device(text)
        assert (spec.kind, spec.torch_type, spec.index) == expected


@given(
    kind=st.sampled_from(INDEXED_KINDS),
    index=st.none() | st.integers(0, MAX_DEVICE_INDEX - 1),
    upper=st.lists(st.booleans(), min_size=4, max_size=4),
    before=WHITESPACE,
    after=WHITESPACE,
)
def test_every_accepted_form_parses_and_round_trips(kind, index, upper, before, after):
    """kind[:N] in any case with surrounding whitespace parses, and str() round-trips."""
    cased = "".join(c.upper() if u else c for c, u in zip(kind, upper[: len(kind)], strict=True))
    text = before + cased + ("" if index is None else f":{index}") + after
    spec = parse_device(text)
    assert (spec.kind, spec.torch_type, spec.index) == (kind, TORCH_TYPE[kind], index)
    assert parse_device(str(spec)) == spec
    assert spec.torch_device_string == (
        TORCH_TYPE[kind] if index is None else f"{TORCH_TYPE[kind]}:{index}"
    )


@pytest.mark.parametrize("text", ["cpu", "CPU", " cpu:0 ", "auto", " AUTO\n"])
def test_cpu_and_auto(text):
    """cpu takes no index or 0; auto takes none and has no torch type until resolved."""
    _check_against_oracle(text)
    spec = parse_device(text)
    assert parse_device(str(spec)) == spec
    if spec.is_auto:
        with pytest.raises(ValueError):
            _ = spec.torch_device_string


MALFORMED = [
    "",
    " ",
    "cuda:",
    ":0",
    "cuda:-1",
    "cuda:+1",
    "cuda:01",
    "cuda:00",
    "cuda: 0",
    "cuda :0",
    "cu da",
    "cuda:0:1",
    "cuda::0",
    "cuda0",
    "cuda-0",
    "cuda.0",
    "cuda:0x1",
    "cuda:1e3",
    "cuda:1.0",
    f"cuda:{MAX_DEVICE_INDEX}",
    "cuda:99999999999999999999",
    "cpu:1",
    "cpu:00",
    "auto:0",
    "gpu",
    "gpu:0",
    "tpu",
    "mps",
    "meta",
    "rocm:a",
    "npu:٣",
    "xpu:３",
    "ｃｕｄａ",
    "cuda\x00",
    "musa:0\x00",
    "hip:0,1",
    "cuda:0 cuda:1",
    "'cuda'",
    "cuda;",
    "cuda/0",
    "CUDA:-0",
    "xpu: ",
    "None",
]


@pytest.mark.parametrize("text", MALFORMED)
def test_malformed_strings_raise_listing_accepted_forms(text):
    """Each malformed string raises InvalidDeviceString, a ValueError naming the forms."""
    assert text.strip().lower() not in VALID
    with pytest.raises(InvalidDeviceString) as excinfo:
        parse_device(text)
    assert isinstance(excinfo.value, ValueError)


def test_message_lists_the_accepted_forms():
    """The error for a malformed string lists every accepted form."""
    with pytest.raises(InvalidDeviceString) as excinfo:
        parse_device("gpu:0")
    for form in (
        "cpu",
        "cuda[:N]",
        "rocm[:N]",
        "hip[:N]",
        "npu[:N]",
        "xpu[:N]",
        "musa[:N]",
        "auto",
    ):
        assert form in str(excinfo.value)


@pytest.mark.parametrize("value", [None, 0, b"cuda", ["cuda"], 1.5])
def test_non_strings_raise(value):
    """A device that is not a string (nor a DeviceSpec) raises InvalidDeviceString."""
    with pytest.raises(InvalidDeviceString):
        parse_device(value)


def _mutations(valid: str) -> st.SearchStrategy[str]:
    """Strings near a valid one: one character inserted, deleted or replaced."""
    alphabet = st.sampled_from(list("abcdhimnprsuxz0123456789:-+._ \t/") + ["٣", "０", "İ"])
    position = st.integers(0, len(valid))
    insert = st.tuples(position, alphabet).map(lambda p: valid[: p[0]] + p[1] + valid[p[0] :])
    delete = position.map(lambda i: valid[:i] + valid[i + 1 :])
    replace = st.tuples(position, alphabet).map(lambda p: valid[: p[0]] + p[1] + valid[p[0] + 1 :])
    return insert | delete | replace


SEEDS = sorted(VALID)[::97] + ["cuda:7", "rocm:12", "cpu:0", "auto"]
NEAR_MISSES = st.sampled_from(SEEDS).flatmap(_mutations)


@settings(max_examples=400)
@given(text=NEAR_MISSES | st.text(max_size=12))
@example(text="cuda:1023")
@example(text="hip:0")
@example(text="İpu")
def test_parser_agrees_with_the_enumerated_oracle(text):
    """For arbitrary and near-miss strings, parsing succeeds exactly on the accepted set."""
    _check_against_oracle(text)


def test_extra_kinds_from_plugins():
    """A kind declared by an installed plugin is accepted as kind[:N], mapped to itself."""
    spec = parse_device("fakeaccel:2", extra_kinds=("fakeaccel",))
    assert (spec.kind, spec.torch_type, spec.index) == ("fakeaccel", "fakeaccel", 2)
    with pytest.raises(InvalidDeviceString):
        parse_device("fakeaccel:2")


def test_device_spec_passes_through_and_validates():
    """A DeviceSpec is returned as is; an out-of-range index is refused at construction."""
    spec = DeviceSpec("rocm", "cuda", 3)
    assert parse_device(spec) is spec
    with pytest.raises(InvalidDeviceString):
        DeviceSpec("cuda", "cuda", MAX_DEVICE_INDEX)
