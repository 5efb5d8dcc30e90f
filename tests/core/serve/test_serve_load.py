"""benchmarks/serve_load.py's smoke check: the harness against a tiny model on the CPU,
plain and speculative, writes one row per mode and concurrency with every token counted."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

SCRIPT = Path(__file__).parents[3] / "benchmarks" / "serve_load.py"


def test_serve_load_runs_on_a_tiny_model(tmp_path):
    spec = importlib.util.spec_from_file_location("serve_load", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = tmp_path / "load.json"
    assert module.main(["--tiny", "--concurrency", "1,3", "--num-prompts", "5",
                        "--max-tokens", "6", "--max-context", "512", "--ignore-eos",
                        "--out", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["mode"], r["concurrency"]) for r in rows] == [
        ("plain", 1), ("plain", 3), ("spec", 1), ("spec", 3)]
    for row in rows:
        assert row["requests"] == 5 and row["tokens"] == 5 * 6
        assert row["tokens_per_s"] > 0 and row["ttft_p99_ms"] >= row["ttft_p50_ms"] > 0
