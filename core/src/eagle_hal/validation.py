"""Checks of the values users pass, shared by the Python API, the command line and servers.

Each checker takes the parameter's name as its caller spells it (``"top_p"`` in Python,
``"--top-p"`` on the command line), returns the value (converted where that is lossless)
and raises ``InvalidArgument`` naming the parameter, the value and what is allowed.
``arg_type`` turns a checker into an ``argparse`` ``type=``, so that a bad flag is a usage
error (exit status 2) before any backend or model loads.

Floats must be finite wherever they are taken: NaN compares false with everything, so a
range check alone lets it through. Booleans are not integers here, although Python's
``bool`` is an ``int``: ``max_tokens=True`` is a mistake, not a 1.

This module imports nothing heavy.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Collection
from typing import Any, TypeVar

from eagle_hal.errors import InvalidArgument

__all__ = [
    "MAX_COUNT",
    "arg_type",
    "check_choice",
    "check_float",
    "check_int",
    "check_optional_int",
    "check_positive_int",
]

# Counts (tokens, requests, positions) end up in int32 tensors; anything larger is a typo.
MAX_COUNT = 2**31 - 1

T = TypeVar("T")


def check_float(
    name: str,
    value: Any,
    *,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """A finite real number in the range given (``low``/``high`` ``None``: unbounded; the
    ``*_open`` flags exclude that end)."""
    lo = "(" if low_open or low is None else "["
    hi = ")" if high_open or high is None else "]"
    allowed = (f"a finite number in {lo}{'-inf' if low is None else low}, "
               f"{'inf' if high is None else high}{hi}")
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidArgument(name, value, allowed)
    number = float(value)
    if not math.isfinite(number):
        raise InvalidArgument(name, value, allowed)
    if low is not None and (number < low or (low_open and number == low)):
        raise InvalidArgument(name, value, allowed)
    if high is not None and (number > high or (high_open and number == high)):
        raise InvalidArgument(name, value, allowed)
    return number


def check_int(name: str, value: Any, *, low: int = 0, high: int = MAX_COUNT,
              meaning: str = "") -> int:
    """An integer in ``[low, high]``; ``meaning`` says what a special value does (e.g.
    ``"0 disables it"``) and joins the message."""
    allowed = f"an integer in [{low}, {high}]" + (f" ({meaning})" if meaning else "")
    if isinstance(value, bool) or not isinstance(value, int):
        # integral floats (2.0) are refused too: a count is never computed as a float
        raise InvalidArgument(name, value, allowed)
    if not low <= value <= high:
        raise InvalidArgument(name, value, allowed)
    return int(value)


def check_positive_int(name: str, value: Any, *, high: int = MAX_COUNT) -> int:
    """An integer in ``[1, high]``."""
    return check_int(name, value, low=1, high=high)


def check_optional_int(name: str, value: Any, *, low: int = 0, high: int = MAX_COUNT,
                       meaning: str = "") -> int | None:
    """``None``, or an integer as ``check_int`` allows."""
    if value is None:
        return None
    return check_int(name, value, low=low, high=high,
                     meaning=meaning or "or None for the default")


def check_choice(name: str, value: Any, choices: Collection[Any]) -> Any:
    """One of ``choices`` (compared with ``==``, types included: ``True`` is not ``1``)."""
    for choice in choices:
        if type(choice) is type(value) and choice == value:
            return value
    raise InvalidArgument(name, value, "one of " + ", ".join(repr(c) for c in choices))


def arg_type(check: Callable[..., T], convert: Callable[[str], Any] = int,
             **limits: Any) -> Callable[[str], T]:
    """An ``argparse`` ``type=`` running ``check`` on the flag's text converted by
    ``convert``; argparse names the flag in its usage error (exit status 2)."""
    kind = "an integer" if convert is int else "a number"

    def parse(text: str) -> T:
        try:
            value = convert(text.strip())
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {kind}") from None
        try:
            return check("value", value, **limits)
        except InvalidArgument as bad:
            raise argparse.ArgumentTypeError(f"{text!r} is not valid: expected {bad.allowed}"
                                             ) from None

    parse.__name__ = kind  # what argparse calls the type when it has no better message
    return parse
