"""How cheap are `import eagle_hal` and `eagle-hal backends`?

Times each command as a fresh subprocess (median of --runs), next to the interpreter's own
start-up and a bare `import torch`, which every probe needs and which dominates the listing.
Then reports which modules each step imported: `import eagle_hal` should import neither
torch nor pluggy, and listing should import no backend implementation and no vendor
library beyond what the probes need (a vendor library is imported only by its own probe,
and only where it is installed).

    .venv/bin/python benchmarks/bench_backends_cli.py [--runs 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

VENDOR_LIBRARIES = ("torch_npu", "torch_musa", "intel_extension_for_pytorch", "torch_mlu")

_MODULE_REPORT = """
import json, sys, time
start = time.perf_counter()
import eagle_hal
imported = time.perf_counter()
after_import = sorted(m for m in ("torch", "pluggy") if m in sys.modules)
from eagle_hal.registry import default_registry
default_registry().entries()
discovered = time.perf_counter()
default_registry().backends()
probed = time.perf_counter()
loaded = sorted(m for m in sys.modules if m.startswith("eagle_hal_"))
print(json.dumps({
    "seconds": {
        "import eagle_hal": imported - start,
        "discover plugins (import plugin modules, pluggy)": discovered - imported,
        "probe every backend (imports torch)": probed - discovered,
    },
    "after_import": after_import,
    "implementations": [m for m in loaded if m.endswith(".backend")],
    "plugins": [m for m in loaded if m.endswith(".plugin")],
    "vendor_libraries": sorted(m for m in VENDOR_LIBRARIES if m in sys.modules),
}))
"""


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("EAGLE_HAL_")}


def _median_seconds(command: list[str], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=_env())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="subprocess runs per figure")
    args = parser.parse_args()
    python = sys.executable
    script = Path(python).parent / "eagle-hal"
    cli = [str(script)] if script.exists() else [python, "-m", "eagle_hal.cli"]
    commands = {
        "python -c pass (interpreter start-up)": [python, "-c", "pass"],
        "python -c 'import eagle_hal'": [python, "-c", "import eagle_hal"],
        "python -c 'import torch' (for reference)": [python, "-c", "import torch"],
        "eagle-hal backends --json": [*cli, "backends", "--json"],
    }
    print(f"median of {args.runs} runs, each a fresh process ({python})")
    width = max(len(name) for name in commands)
    for name, command in commands.items():
        seconds = _median_seconds(command, args.runs)
        print(f"  {name:<{width}}  {seconds * 1000:8.1f} ms")
    code = f"VENDOR_LIBRARIES = {VENDOR_LIBRARIES!r}\n{_MODULE_REPORT}"
    report = json.loads(
        subprocess.run(
            [python, "-c", code], check=True, capture_output=True, text=True, env=_env()
        ).stdout
    )
    print("phases of one listing, in process")
    width = max(len(name) for name in report["seconds"])
    for name, seconds in report["seconds"].items():
        print(f"  {name:<{width}}  {seconds * 1000:8.1f} ms")
    nothing = "none"
    print("modules")
    print(f"  torch/pluggy after `import eagle_hal`: {report['after_import'] or nothing}")
    print(f"  backend implementations imported:     {report['implementations'] or nothing}")
    print(f"  plugin modules imported:              {', '.join(report['plugins'])}")
    print(f"  vendor libraries imported:            {report['vendor_libraries'] or nothing}")
    cheap = not report["after_import"] and not report["implementations"]
    return 0 if cheap else 1


if __name__ == "__main__":
    sys.exit(main())
