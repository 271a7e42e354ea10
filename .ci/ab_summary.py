"""Summarize an A/B of `bench model` runs: python .ci/ab_summary.py DIR

DIR holds JSON files named TREE-CONFIG-REP.json (bench model --json), e.g. base-b1-0.json,
head-llama318bb64-2.json (.ci/h200's ab stage: the shape without '-' and '.', then b and the slots). Prints, per config, each tree's median (and range) of the step ms p50, the steady
tok/s and the GPU ms of one step, and head / base."""
import collections
import json
import pathlib
import statistics
import sys

runs = collections.defaultdict(list)
for path in sorted(pathlib.Path(sys.argv[1]).glob("*.json")):
    tree, config, _ = path.stem.split("-")
    row = json.loads(path.read_text())["decode"][-1]
    runs[config, tree].append(row)
keys = [("step_ms_p50", "step ms p50"), ("steady_tok_per_s", "steady tok/s"), ("agg_tok_per_s", "agg tok/s"),
        ("gpu_ms_per_step", "gpu ms/step")]
configs = sorted({c for c, _ in runs})
w = max([6] + [len(c) for c in configs])
print(f"{'config':<{w}} {'figure':<14} {'base median (range)':>28} {'head median (range)':>28} {'head/base':>9}")
for config in configs:
    for key, label in keys:
        cells, meds = [], []
        for tree in ("base", "head"):
            vals = [r[key] for r in runs[config, tree] if r.get(key) is not None]
            if not vals:
                cells.append(f"{'-':>28}"); meds.append(None); continue
            m = statistics.median(vals)
            meds.append(m)
            cells.append(f"{m:>12.3f} ({min(vals):.3f}-{max(vals):.3f})".rjust(28))
        ratio = f"{meds[1] / meds[0]:>9.3f}" if None not in meds and meds[0] else f"{'-':>9}"
        print(f"{config:<{w}} {label:<14} {cells[0]} {cells[1]} {ratio}")
