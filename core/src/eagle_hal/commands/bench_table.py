"""``eagle-hal bench``'s printed table: one line per mode and batch size, then plain
decoding's memory-bandwidth figures where measured (``bench_bandwidth``).

A row under an oracle accept length (``speculative.oracle_accept``) is labelled as such: its
ratio over plain is the engine's cost at that accept length, not a speedup anyone gets.
"""

from __future__ import annotations

from typing import Any

__all__ = ["format_table"]

_PHASES = ("draft", "verify", "accept", "draft_extend", "other", "engine")


def _ms(phases: dict[str, float] | None, name: str) -> str:
    if not phases or name not in phases:
        return "-"
    return f"{phases[name]:.2f}"


def format_table(report: dict[str, Any]) -> str:
    """The results of ``report`` (``eagle-hal bench``'s ``results.json``) as a text table."""
    config = report.get("config", {})
    lines = []
    if config.get("random_target"):
        lines.append(f"random-weight target {config['random_target']} "
                     f"({config.get('dtype')}, prompts: random token ids, "
                     f"~{config.get('prompt_tokens')} tokens each; outputs meaningless)")
    header = ("| mode | batch | accept rule | tokens/s | vs plain | accept len | "
              + " | ".join(f"{p} ms" for p in _PHASES) + " | outside forwards |")
    lines += [header, "|" + "---|" * (header.count("|") - 1)]
    for row in report.get("results", []):
        tau = row.get("oracle_accept")
        rule = row.get("oracle_label", "") if tau is not None else "target"
        if tau is not None:
            ratio = row.get("ratio_at_oracle_accept")
            versus = f"{ratio:.2f}x (oracle, not a speedup)" if ratio is not None else "-"
        else:
            versus = f"{row['speedup']:.2f}x" if "speedup" in row else "-"
        phases = row.get("iteration_ms")
        outside = row.get("outside_forwards")
        lines.append(
            f"| {row['mode']} | {row['batch_size']} | {rule} | {row['tokens_per_s']:.1f} | "
            f"{versus} | {row['accept_length']:.2f} | "
            + " | ".join(_ms(phases, p) for p in _PHASES)
            + f" | {'-' if outside is None else f'{100 * outside:.1f} %'} |")
    bandwidth = [r for r in report.get("results", []) if r.get("bandwidth")]
    if bandwidth:
        lines += ["", "plain decoding against memory bandwidth (weights read per step, "
                  "the embedding's batch rows only, plus the K/V read):",
                  "| batch | GB per step | step ms | GB/s | of measured copy | of nominal peak |",
                  "|---|---|---|---|---|---|"]
        for row in bandwidth:
            b = row["bandwidth"]
            peak = (f"{100 * b['fraction_of_peak']:.1f} % of {b['peak_bytes_per_s'] / 1e9:.0f}"
                    if b.get("fraction_of_peak") is not None else "- (unknown)")
            copy = (f"{100 * b['fraction_of_copy']:.1f} % of "
                    f"{b['copy_bytes_per_s'] / 1e9:.0f}")
            lines.append(f"| {row['batch_size']} | {b['bytes_per_step'] / 1e9:.3f} | "
                         f"{b['step_ms']:.3f} | {b['bytes_per_s'] / 1e9:.0f} | {copy} | "
                         f"{peak} |")
    return "\n".join(lines)
