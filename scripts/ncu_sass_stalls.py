#!/usr/bin/env python3
"""Where a kernel's warps stall, per SASS instruction, from Nsight Compute's source page:
    ncu --import R.ncu-rep --page source --csv --print-source sass > R_sass.csv
    scripts/ncu_sass_stalls.py R_sass.csv [TOP]
Prints the sampled stalls by opcode, then the TOP instructions with the most samples (share of
all samples, and of those where the warp issued nothing), each with the instruction before it:
a wait's cost usually belongs to what it waits for."""
import collections
import csv
import sys


def column(header, *names):
    for name in names:
        for i, h in enumerate(header):
            if h.strip().lower() == name.lower():
                return i
    for name in names:
        for i, h in enumerate(header):
            if name.lower() in h.strip().lower():
                return i
    return None


def number(text):
    try:
        return float(text.replace(",", "")) if text else 0.0
    except ValueError:
        return 0.0


def main():
    path = sys.argv[1]
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if column(r, "Source") is not None and column(r, "Address") is not None), None)
    if start is None:
        sys.exit(f"{path}: no header with Address and Source columns (is it ncu's --page source --csv output?)")
    header, body = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
    a, s = column(header, "Address", "# Address"), column(header, "Source")
    stall = column(header, "Warp Stall Sampling (All Samples)", "Warp Stall Sampling (All")
    idle = column(header, "Warp Stall Sampling (Not-issued Samples)", "Not-issued")
    execd = column(header, "Instructions Executed")
    if stall is None:
        sys.exit(f"{path}: no 'Warp Stall Sampling' column; columns: {header}")
    total = sum(number(r[stall]) for r in body) or 1.0
    total_idle = sum(number(r[idle]) for r in body) if idle is not None else 0.0
    print(f"{len(body)} instructions, {total:.0f} stall samples ({total_idle:.0f} not issued)")
    by_op = collections.Counter()
    for r in body:
        op = r[s].split()[0] if r[s].split() else "?"
        if op.startswith("@"):
            op = r[s].split()[1] if len(r[s].split()) > 1 else op
        by_op[op.split(".")[0]] += number(r[stall])
    print("by opcode: " + ", ".join(f"{op} {100 * n / total:.1f}%" for op, n in by_op.most_common(14)))
    order = sorted(range(len(body)), key=lambda i: -number(body[i][stall]))[:top]
    print(f"{'addr':>6} {'all%':>6} {'idle%':>6} {'executed':>10}  instruction  (previous)")
    for i in sorted(order):
        r = body[i]
        prev = body[i - 1][s].strip() if i > 0 else ""
        share_idle = 100 * number(r[idle]) / total_idle if idle is not None and total_idle else 0.0
        ex = number(r[execd]) if execd is not None else 0.0
        print(f"{r[a].strip():>6} {100 * number(r[stall]) / total:6.2f} {share_idle:6.2f} {ex:10.0f}  "
              f"{r[s].strip()[:60]:<60}  ({prev[:40]})")


if __name__ == "__main__":
    main()
