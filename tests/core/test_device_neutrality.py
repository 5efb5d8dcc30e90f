"""Nothing under core/ may name a vendor API or branch on a vendor's device-type string.

Vendor code lives in backends/<vendor>/; the core reaches devices through
``torch.accelerator``, ``torch.get_device_module`` or the selected backend.
"""

from __future__ import annotations

import re
from pathlib import Path

CORE_SRC = Path(__file__).resolve().parents[2] / "core" / "src"

_VENDOR_TYPES = r"(?:cuda|hip|rocm|npu|xpu|musa)"
FORBIDDEN: dict[str, re.Pattern[str]] = {
    "vendor torch namespace": re.compile(r"\btorch\s*\.\s*(?:cuda|npu|xpu|musa|mlu|hpu)\b"),
    "from torch import vendor": re.compile(
        r"\bfrom\s+torch\s+import\s+.*\b(?:cuda|npu|xpu|musa)\b"
    ),
    "vendor build query": re.compile(r"\btorch\s*\.\s*version\s*\.\s*(?:hip|cuda|xpu)\b"),
    "vendor extension": re.compile(
        r"\b(?:torch_npu|torch_musa|torch_mlu|intel_extension_for_pytorch|habana_frameworks)\b"
    ),
    "is_hip": re.compile(r"\bis_hip\b"),
    "vendor string branch": re.compile(
        rf"""(?:==|!=|\bis\b)\s*["']{_VENDOR_TYPES}["']"""
        rf"""|["']{_VENDOR_TYPES}["']\s*(?:==|!=|\bin\b)"""
        rf"""|\.startswith\(\s*["']{_VENDOR_TYPES}"""
        rf"""|\bin\s*\(\s*["']{_VENDOR_TYPES}["']"""
    ),
}


def find_vendor_references(root: Path) -> list[str]:
    """``path:line: kind: text`` for every forbidden reference in the .py files under root."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for kind, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    found.append(f"{path}:{number}: {kind}: {line.strip()}")
    return found


def test_core_names_no_vendor_api():
    """The current core tree is vendor-neutral."""
    assert CORE_SRC.is_dir()
    assert find_vendor_references(CORE_SRC) == []


def test_scanner_catches_each_kind_of_reference(tmp_path):
    """The scanner flags each forbidden form (and not neutral code), naming file and line."""
    offending = [
        "torch.cuda.synchronize()",
        "stream = torch . npu.current_stream()",
        "x = torch.xpu.device_count()",
        "torch.musa.is_available()",
        "from torch import cuda",
        "if torch.version.hip:",
        "v = torch.version.cuda",
        "import torch_npu",
        "import torch_musa",
        "import intel_extension_for_pytorch as ipex",
        "if is_hip(): pass",
        'if device.type == "cuda":',
        "if 'npu' != kind:",
        'if "cuda" in str(device):',
        'if name.startswith("xpu"):',
        'if kind in ("cuda", "hip"):',
    ]
    neutral = [
        'device = torch.device("cpu")',
        "torch.accelerator.synchronize()",
        "module = torch.get_device_module(device.type)",
        'KIND_TO_TORCH_TYPE = {"rocm": "cuda"}',
        "# CUDA graphs are captured by the backend",
    ]
    source = tmp_path / "pkg" / "module.py"
    source.parent.mkdir()
    source.write_text("\n".join(neutral + offending) + "\n")
    found = find_vendor_references(tmp_path)
    flagged_lines = [int(entry.split(":")[1]) for entry in found]
    expected = list(range(len(neutral) + 1, len(neutral) + len(offending) + 1))
    assert sorted(set(flagged_lines)) == expected
    assert all(entry.startswith(f"{source}:") for entry in found)
