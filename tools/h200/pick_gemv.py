"""Pick EAGLE_HAL_GEMV=ROWS:CONFIG from a bench_fused_linear.py table (lease AD): the
row-parallel config (``r`` in its name) and the row count up to which it runs that give the
lowest summed per-layer time over 2-16 rows, the rest on the default; printed only where it
beats the default by over 3 %, else an empty line."""

import sys

lines = open(sys.argv[1]).read().splitlines()
head = next(line.split() for line in lines if line.split()[:2] == ["rows", "unfused"])
table = {}
for line in lines:
    fields = line.split()
    if fields and fields[0].isdigit() and len(fields) >= len(head):
        table[int(fields[0])] = {
            name: (float("inf") if value in ("error",) or value.endswith("!")
                   else float(value.rstrip("x")))
            for name, value in zip(head, fields)
        }
rows = [r for r in sorted(table) if r >= 2]
default = sum(table[r]["fused"] for r in rows)
best, best_score = "", default
for name in (n for n in head if n.startswith("g") and "r" in n):
    for cutoff in (r for r in rows if r >= 4):
        score = sum(table[r][name] if r <= cutoff else table[r]["fused"] for r in rows)
        if score < best_score:
            best, best_score = f"{cutoff}:{name}", score
print(best if best and best_score < 0.97 * default else "")
print(f"# default {default:.2f} us summed over rows {rows}; best {best or '-'} {best_score:.2f}",
      file=sys.stderr)
