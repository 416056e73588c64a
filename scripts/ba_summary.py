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
    parts = line.split()
    if side is None or len(parts) < 4 or not parts[-1].endswith("%"):
        continue
    key = " ".join(parts[:-3])  # op, shape, dtype; then ms, TB/s, %roof
    rows.setdefault(key, {"before": [], "after": []})[side].append(float(parts[-2]))
for key, v in rows.items():
    b, a = v["before"], v["after"]
    ratio = f"{statistics.median(a) / statistics.median(b):.3f}" if a and b else "-"
    print(f"{key:<44} {' '.join(f'{x:.2f}' for x in b):>11} -> {' '.join(f'{x:.2f}' for x in a):<11} {ratio}")
