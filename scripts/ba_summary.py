#!/usr/bin/env python3
"""Pairs the rows of scripts/bench_before_after.sh's output: per row, every round's
TB/s before and after, and the ratio of the medians (after / before)."""
import collections
import re
import statistics
import sys

rows = collections.OrderedDict()
side = None
for line in open(sys.argv[1]):
    m = re.match(r"== (before|after)", line)
    if m:
        side = m.group(1)
        continue
    if side is None:
        continue
    # --mla's own rows: shape, backend, q / kv, us, TB/s, % HBM, ...
    # (the backend column carries the narrow tile's rows: trtllm-gen/16, /32, /64)
    m = re.match(r"^(h\d+.*?)\s+(xqa|trtllm-gen(?:/\d+)?)\s+(.+?)\s+[\d.]+\s+([\d.]+)\s+[\d.]+%", line)
    if m:
        key, value = f"mla {m.group(1)} {m.group(2)} {m.group(3)}", float(m.group(4))
    else:
        parts = line.split()
        if len(parts) < 4 or not parts[-1].endswith("%") or parts[0] == "mla":
            continue
        key, value = " ".join(parts[:-3]), float(parts[-2])  # op, shape, dtype; then ms, TB/s, %roof
    rows.setdefault(key, {"before": [], "after": []})[side].append(value)
for key, v in rows.items():
    b, a = v["before"], v["after"]
    ratio = f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else "-"
    print(f"{key:<44} {' '.join(f'{x:.2f}' for x in b):>11} -> {' '.join(f'{x:.2f}' for x in a):<11} {ratio}")
