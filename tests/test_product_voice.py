"""The repository describes the product as it is: no tracked file tells how it was built
(which work period, which borrowed machine, which ticket). That history belongs in commit
messages."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ORDINAL = (r"(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|"
           r"twelfth|[a-z]+teenth|twentieth|twenty-[a-z]+|thirtieth|thirty-[a-z]+|last|this|"
           r"next|previous|earlier)")
HISTORY = re.compile(
    # character classes ([ ], [-]) keep this pattern from matching its own source line
    r"\b(lease[ ][0-9]|" + ORDINAL + r" session|device[ ]tool|device[-]seconds?|"
    r"no GPU (was )?lent|was[ ]lent|issue[ ]#?[0-9]+)",
    re.IGNORECASE,
)
LEASE = re.compile(r"\b[Ll]ease[sd]? [A-Z]{1,2}\b|lease[A-Z]{1,2}_call")  # a machine's name


def _history(line: str) -> bool:
    return bool(HISTORY.search(line) or LEASE.search(line))


DATA = ("benchmarks/data/",)  # third-party prompt text, kept verbatim


def _tracked() -> list[str]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True,
                            check=True).stdout.decode().split("\0")
    return [f for f in listed if f and not f.startswith(DATA)]


def test_the_pattern_catches_what_it_is_for():
    # spelt in pieces, so that this file does not itself carry the words it looks for
    for line in ("measured in the third " + "session", "on lea" + "se BH", "see iss" + "ue 41",
                 "leaseBB" + "_call1.sh", "1,543 device-" + "seconds"):
        assert _history(line), line
    for line in ("a conformance session runs pytest", "a page's lease ends", "issue a warning"):
        assert not _history(line), line


def test_no_tracked_file_speaks_of_how_it_was_built():
    found = []
    for name in _tracked():
        path = ROOT / name
        if not path.is_file():
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # binary (images, weights)
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _history(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not found, "\n".join(found[:20])
