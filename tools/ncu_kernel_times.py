#!/usr/bin/env python3
"""Sums an Nsight Compute raw CSV (`ncu --metrics gpu__time_duration.sum --csv --page raw`)
by kernel and grid: launches, total and mean duration, largest total first.

Usage: tools/ncu_kernel_times.py profile.csv [--top N]
"""
import argparse
import collections
import csv
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csv")
    parser.add_argument("--top", type=int, default=40)
    args = parser.parse_args()
    with open(args.csv, newline="") as f:
        rows = list(csv.reader(f))
    header_at = next((i for i, r in enumerate(rows) if "Kernel Name" in r), None)
    if header_at is None:
        print(f"{args.csv}: no ncu raw table (no 'Kernel Name' column)", file=sys.stderr)
        return 1
    header = rows[header_at]
    name_i = header.index("Kernel Name")
    grid_i = header.index("Grid Size")
    time_i = header.index("gpu__time_duration.sum")
    unit = rows[header_at + 1][time_i] if len(rows) > header_at + 1 else ""
    scale = {"nsecond": 1e-3, "usecond": 1.0, "msecond": 1e3}.get(unit, 1e-3)
    totals = collections.defaultdict(lambda: [0, 0.0])
    for r in rows[header_at + 1:]:
        if len(r) != len(header):
            continue
        try:
            t = float(r[time_i].replace(",", "")) * scale
        except ValueError:
            continue  # the units row
        entry = totals[(r[name_i][:110], r[grid_i])]
        entry[0] += 1
        entry[1] += t
    launches = sum(n for n, _ in totals.values())
    print(f"{launches} kernel launches; durations in us")
    for (name, grid), (n, t) in sorted(totals.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{n:6d} {t:11.1f} total {t / n:9.2f} each  grid {grid:>14}  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
