#!/usr/bin/env python3
"""Tables scripts/gpu_run.sh's SWEEP log: a row per benchmark row, a column per setting with
every round's rate (TB/s or TFLOP/s, the column before the roofline share) and the ratio of its
mean to the base setting's (the first, or the one whose label argv[2] names).
Usage: scripts/sweep_summary.py sweep.log [BASE_LABEL]"""
import collections
import re
import sys


def label(knobs):
    # A template set reads as its staged folder's name (tpl-before -> "before"); gpu_run.sh
    # writes "defaults" for an empty setting.
    knobs = re.sub(r"ATTNJIT_TEMPLATE_DIR=\S*/tpl-(\S+)", r"\1", knobs.strip())
    return knobs or "defaults"


lines = open(sys.argv[1]).read().splitlines()
heads = [re.match(r"== sweep round \d+ \[[^]]*\]: (.*) \((.*)\)$", line) for line in lines]
# A setting's arguments join its label only where the sweep ran more than one set of them.
several_args = len({m.group(2) for m in heads if m}) > 1
rates = collections.OrderedDict()  # row -> setting -> [rate per round]
settings = []
setting = None
for line, m in zip(lines, heads):
    if m:
        setting = label(m.group(1))
        if several_args:
            setting += f" ({m.group(2)})"
        if setting not in settings:
            settings.append(setting)
        continue
    parts = line.split()
    if setting is None or len(parts) < 4 or not parts[-1].endswith("%"):
        continue
    try:
        value = float(parts[-2])
    except ValueError:
        continue
    rates.setdefault(" ".join(parts[:-3]), collections.OrderedDict()).setdefault(setting, []).append(value)

base = sys.argv[2] if len(sys.argv) > 2 else (settings[0] if settings else None)
print("| row | " + " | ".join(settings) + " |")
print("|---" * (len(settings) + 1) + "|")
for row, by_setting in rates.items():
    b = by_setting.get(base)
    cells = []
    for s in settings:
        v = by_setting.get(s)
        if not v:
            cells.append("-")
            continue
        cell = " / ".join(f"{x:.1f}" for x in v)
        if b and s != base:
            cell += f" ({(sum(v) / len(v)) / (sum(b) / len(b)):.3f})"
        cells.append(cell)
    print(f"| {row} | " + " | ".join(cells) + " |")
