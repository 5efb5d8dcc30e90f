"""The conformance report: one result per check, grouped by area, with the environment.

``ConformanceReport.to_json()`` is the machine-readable form (``eagle-hal conformance
--report FILE``); ``format_table()`` the human one. A run *fails* when any check failed or
passed unexpectedly (a declared known failure that no longer fails must be undeclared).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import platform
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from eagle_hal.backend import Backend

__all__ = ["CheckResult", "ConformanceReport", "Outcome", "describe_environment"]

REPORT_FORMAT = 1


class Outcome(enum.Enum):
    PASS = "pass"
    SKIP = "skip"
    FAIL = "fail"
    EXPECTED_FAIL = "expected-fail"  # declared in Backend.known_failures() and still failing
    UNEXPECTED_PASS = "unexpected-pass"  # declared a known failure, but passed

    @property
    def is_failure(self) -> bool:
        return self in (Outcome.FAIL, Outcome.UNEXPECTED_PASS)


@dataclasses.dataclass(frozen=True, slots=True)
class CheckResult:
    """One check's outcome. ``check_id`` is ``"<area>/<check>[<parameters>]"``."""

    check_id: str
    area: str
    outcome: Outcome
    message: str = ""  # the failure, the skip reason, or the declared known-failure reason
    duration_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "check": self.check_id,
            "area": self.area,
            "outcome": self.outcome.value,
            "message": self.message,
            "duration_s": round(self.duration_s, 4),
        }


@dataclasses.dataclass(frozen=True, slots=True)
class ConformanceReport:
    """Every check's result and the environment the suite ran in."""

    environment: dict[str, Any]
    results: tuple[CheckResult, ...]
    areas: tuple[str, ...]

    @property
    def failed(self) -> bool:
        return any(r.outcome.is_failure for r in self.results) or not self.results

    def counts(self, area: str | None = None) -> dict[str, int]:
        """``{outcome value: count}`` over one area (or all), every outcome present."""
        counts = {outcome.value: 0 for outcome in Outcome}
        for result in self.results:
            if area is None or result.area == area:
                counts[result.outcome.value] += 1
        return counts

    def area_status(self, area: str) -> str:
        counts = self.counts(area)
        if counts["fail"] or counts["unexpected-pass"]:
            return "FAIL"
        if not any(counts.values()):
            return "not run"
        return "skip" if counts["skip"] == sum(counts.values()) else "ok"

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REPORT_FORMAT,
            "passed": not self.failed,
            "environment": self.environment,
            "areas": {area: {"status": self.area_status(area), **self.counts(area)}
                      for area in self.areas},
            "totals": self.counts(),
            "checks": [r.to_json() for r in self.results],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ConformanceReport:
        results = tuple(
            CheckResult(c["check"], c["area"], Outcome(c["outcome"]), c["message"], c["duration_s"])
            for c in data["checks"]
        )
        return cls(dict(data["environment"]), results, tuple(data["areas"]))

    def write(self, path: str | Path) -> tuple[Path, Path]:
        """Write the JSON to ``path`` and the table (Markdown) beside it with suffix .md."""
        json_path = Path(path)
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(self.to_json(), indent=2) + "\n")
        table_path = json_path.with_suffix(".md")
        if table_path == json_path:
            table_path = json_path.with_name(json_path.name + ".md")
        table_path.write_text(self.format_table(markdown=True) + "\n")
        return json_path, table_path

    def format_table(self, *, markdown: bool = False) -> str:
        """The environment, a per-area summary, then every check that did not simply pass
        (and, in Markdown, every check)."""
        env = self.environment
        lines = [
            "# eagle-hal conformance report" if markdown else "eagle-hal conformance report",
            "",
        ]
        for key in ("backend", "backend_distribution", "backend_version", "api_version",
                    "device", "device_name", "torch", "eagle_hal", "python", "platform"):
            if env.get(key):
                lines.append(f"- {key}: {env[key]}" if markdown else f"  {key:22} {env[key]}")
        for name, version in sorted(env.get("libraries", {}).items()):
            lines.append(f"- library {name}: {version}" if markdown else f"  {name:22} {version}")
        lines += ["", "## Areas" if markdown else "Areas"]
        header = ["area", "status", "pass", "skip", "fail", "expected-fail", "unexpected-pass"]
        rows = [[area, self.area_status(area), *map(str, self._ordered_counts(area))]
                for area in self.areas]
        rows.append(["total", "FAIL" if self.failed else "ok",
                     *map(str, self._ordered_counts(None))])
        lines += _table(header, rows, markdown)
        shown = (self.results if markdown
                 else [r for r in self.results if r.outcome is not Outcome.PASS])
        if shown:
            lines += ["", "## Checks" if markdown else "Checks (all but plain passes)"]
            lines += _table(
                ["check", "outcome", "message"],
                [[r.check_id, r.outcome.value, _one_line(r.message)] for r in shown],
                markdown,
            )
        lines += ["", f"RESULT: {'FAILED' if self.failed else 'PASSED'}"]
        return "\n".join(lines)

    def _ordered_counts(self, area: str | None) -> list[int]:
        counts = self.counts(area)
        return [counts[o] for o in ("pass", "skip", "fail", "expected-fail", "unexpected-pass")]


def _one_line(message: str, limit: int = 160) -> str:
    text = " ".join(message.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> list[str]:
    if markdown:
        escape = [[cell.replace("|", "\\|") for cell in row] for row in rows]
        return [
            "| " + " | ".join(header) + " |",
            "|" + "|".join("---" for _ in header) + "|",
            *("| " + " | ".join(row) + " |" for row in escape),
        ]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]


def _distribution_of(module_name: str) -> tuple[str, str] | None:
    top = module_name.split(".")[0]
    for dist in metadata.packages_distributions().get(top, []):
        try:
            return dist, metadata.version(dist)
        except metadata.PackageNotFoundError:  # pragma: no cover
            continue
    return None


def describe_environment(device: str, backend: Backend | None, error: str | None) -> dict[str, Any]:
    """Versions and identities for the report; never raises."""
    import torch

    import eagle_hal

    env: dict[str, Any] = {
        "device": device,
        "eagle_hal": eagle_hal.__version__,
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(terse=True),
        "libraries": {},
    }
    if error:
        env["selection_error"] = error
    if backend is None:
        return env
    descriptor = backend.descriptor
    env["backend"] = backend.name
    env["api_version"] = "{}.{}".format(*descriptor.api_version)
    env["backend_class"] = f"{type(backend).__module__}.{type(backend).__qualname__}"
    found = _distribution_of(descriptor.implementation.partition(":")[0])
    if found:
        env["backend_distribution"], env["backend_version"] = found
    env["torch_device"] = str(backend.torch_device)
    env["device_name"] = _device_name(backend)
    libraries: dict[str, str] = {}
    if backend.capabilities.triton:
        try:
            libraries["triton"] = metadata.version("triton")
        except metadata.PackageNotFoundError:
            libraries["triton"] = "not installed"
    try:
        libraries.update({str(k): str(v) for k, v in backend.library_versions().items()})
    except Exception as exc:  # a report must still be written
        libraries["error"] = f"library_versions() raised {type(exc).__name__}: {exc}"
    env["libraries"] = libraries
    env["capabilities"] = backend.capabilities.as_dict()
    return env


def _device_name(backend: Backend) -> str:
    import torch

    device = backend.torch_device
    if device.type == "cpu":
        return platform.processor() or platform.machine()
    try:
        module = torch.get_device_module(device.type)
        return str(module.get_device_name(device))
    except Exception:
        return device.type
