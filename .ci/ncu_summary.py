"""Summarize an ``ncu --csv --metrics gpu__time_duration.sum`` log: GPU time per kernel and grid,
largest first (the per-kernel profile of a decode step; used by .ci/h200's `profile` stage).

    python3 .ci/ncu_summary.py ncu.csv [steps]
"""
import collections
import csv
import sys


def main(path: str, steps: int) -> None:
    with open(path) as f:
        lines = [ln for ln in f if ln.startswith('"')]
    rows = list(csv.DictReader(lines))
    agg: dict = collections.defaultdict(lambda: [0, 0.0])
    total = 0.0
    for r in rows:
        if r.get("Metric Name") != "gpu__time_duration.sum":
            continue
        v = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "nsecond")
        us = v / 1e3 if unit.startswith("n") else v if unit.startswith("u") else v * 1e3
        key = (r["Kernel Name"].split("(")[0][:40], r.get("Grid Size", ""), r.get("Block Size", ""))
        agg[key][0] += 1
        agg[key][1] += us
        total += us
    print(f"{'kernel':<40} {'grid':>14} {'block':>10} {'count':>6} {'mean us':>8} {'total us':>9} {'per step':>9}")
    for (name, grid, block), (n, us) in sorted(agg.items(), key=lambda kv: -kv[1][1]):
        print(f"{name:<40} {grid:>14} {block:>10} {n:>6} {us / n:>8.2f} {us:>9.1f} {us / steps:>9.1f}")
    print(f"total {total:.1f} us over {sum(v[0] for v in agg.values())} kernels; per step {total / steps:.1f} us")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 1)
