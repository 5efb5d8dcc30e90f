"""Write the quoting benchmark: "add type hints and a docstring" over standard-library code.

An answer to such a prompt quotes most of the prompt back, which is where prompt lookup
(``--draft ngram``) drafts well. The functions come from the source of the running
Python's own standard library: the top-level functions of a fixed list of pure-Python
modules, in file order, those with no docstring and no return annotation, of 6 to 30
lines and at most 1,500 characters, the first ``--count`` (default 100). The same Python
gives the same file.

    python benchmarks/quoting_task.py                # -> benchmarks/data/quoting.jsonl
    eagle-hal bench --dataset benchmarks/data/quoting.jsonl --modes plain,ngram

Each line is ``{"prompt": ..., "source": "module.function"}``, which ``eagle-hal bench
--dataset`` reads (``commands.bench_prompts``: the ``prompt`` key).
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import json
import sys
from pathlib import Path

MODULES = (
    "textwrap", "shlex", "fnmatch", "posixpath", "ntpath", "genericpath", "colorsys",
    "bisect", "heapq", "calendar", "string", "base64", "quopri", "html", "difflib",
    "filecmp", "glob", "gettext", "locale", "mimetypes", "netrc", "operator", "pprint",
    "py_compile", "random", "statistics", "tokenize", "urllib.parse", "uu", "weakref",
    "zipfile", "fractions", "ipaddress", "shutil", "tempfile", "traceback", "warnings",
    "argparse", "ast", "codecs", "configparser", "copy", "csv", "dis", "email.utils",
    "getopt", "gzip", "inspect", "linecache", "optparse", "os", "pickletools", "platform",
    "plistlib", "pydoc", "subprocess", "sysconfig", "tarfile", "threading", "timeit",
    "typing", "uuid", "webbrowser",
)
MIN_LINES, MAX_LINES, MAX_CHARS = 6, 30, 1500
INSTRUCTION = ("Add type hints and a docstring to this function. Reply with the whole "
               "function, changed only by the hints and the docstring.")


def functions(module_name: str) -> list[tuple[str, str]]:
    """The module's top-level functions that fit, as (qualified name, source), in file order."""
    try:
        module = importlib.import_module(module_name)
        path = inspect.getsourcefile(module)
    except (ImportError, TypeError):  # removed from this Python, or not pure Python
        return []
    if path is None:
        return []
    text = Path(path).read_text(encoding="utf-8")
    found = []
    for node in ast.parse(text).body:
        if not isinstance(node, ast.FunctionDef) or node.name.startswith("__"):
            continue
        if ast.get_docstring(node) is not None or node.returns is not None:
            continue  # the prompt asks for what the function lacks
        source = ast.get_source_segment(text, node)
        if source is None:
            continue
        lines = source.count("\n") + 1
        if MIN_LINES <= lines <= MAX_LINES and len(source) <= MAX_CHARS:
            found.append((f"{module_name}.{node.name}", source))
    return found


def build(count: int) -> list[dict[str, str]]:
    records = []
    for module_name in MODULES:
        for name, source in functions(module_name):
            records.append({"prompt": f"{INSTRUCTION}\n\n```python\n{source}\n```",
                            "source": name})
            if len(records) == count:
                return records
    return records


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=100, help="functions (default 100)")
    parser.add_argument("--out", type=Path,
                        default=Path(__file__).parent / "data" / "quoting.jsonl")
    args = parser.parse_args(argv)
    records = build(args.count)
    if len(records) < args.count:
        print(f"only {len(records)} functions fit", file=sys.stderr)
        return 1
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record) + "\n")
    print(f"wrote {len(records)} prompts to {args.out} (Python {sys.version.split()[0]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
