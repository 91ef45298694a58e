#!/usr/bin/env python3
"""Tabulate a paged-decode split sweep: `attn_bench --check` (the planner's split) beside
`attn_bench --check --splits N` runs (benches/gpu/steps.sh's `attn` and `attn_s<N>` steps).

    tools/split_sweep.py attn.log attn_s8.log attn_s16.log ...

One row per configuration (`p<page>_b<B>_kv<L>`): the copy ratio of the planner's choice (and the split
it chose), then the ratio at each forced split count, the best marked with `*`; last, for each goal group,
the smallest ratio over its configurations for the planner and for each forced count, and for a planner
that took the best count of each configuration. Forced counts are capped by a sequence's tiles (the
planner's rule), so a short context may run fewer splits than its column says; the `#` line of each
configuration in the log gives what ran.
"""
import re
import sys

import perf_logs

RATIO = re.compile(r"^paged_decode_(p\d+_b\d+_kv\d+)_copy_ratio$")
PLAN = re.compile(r"^# (p\d+_b\d+_kv\d+): (\d+) splits of (\d+) tiles")


def load(path):
    """The log's copy ratios by configuration (its `omega.` metric lines, tools/perf_logs.py), and the
    split each configuration ran (its `#` lines)."""
    ratios = {m.group(1): v for k, v in perf_logs.load(path, "omega").items() if (m := RATIO.match(k))}
    splits = {}
    with open(path, errors="replace") as f:
        for line in f:
            m = PLAN.match(line)
            if m:
                splits[m.group(1)] = (int(m.group(2)), int(m.group(3)))
    return ratios, splits


def forced_count(path):
    m = re.search(r"attn_s(\d+)", path)
    return int(m.group(1)) if m else None


def main(paths):
    auto, auto_splits, forced = {}, {}, {}
    for p in paths:
        n = forced_count(p)
        r, s = load(p)
        if n is None:
            auto, auto_splits = r, s
        else:
            forced[n] = r
    counts = sorted(forced)
    cfgs = sorted(auto or next(iter(forced.values()), {}),
                  key=lambda c: tuple(int(x) for x in re.findall(r"\d+", c)))
    print("config".ljust(18) + "auto (splits)".rjust(16) + "".join(f"s{n}".rjust(8) for n in counts))
    best = {}
    for c in cfgs:
        row = {n: forced[n].get(c) for n in counts}
        cands = {n: v for n, v in row.items() if v is not None}
        if c in auto:
            cands["auto"] = auto[c]
        top = max(cands, key=cands.get) if cands else None
        best[c] = cands.get(top)
        a = auto.get(c)
        sp = auto_splits.get(c, ("?", "?"))
        cell = f"{a:.3f} ({sp[0]}x{sp[1]})" if a is not None else "-"
        line = c.ljust(18) + (("*" if top == "auto" else "") + cell).rjust(16)
        for n in counts:
            v = row[n]
            line += (("*" if top == n else "") + (f"{v:.3f}" if v is not None else "-")).rjust(8)
        print(line)

    def group_min(table, pred):
        vals = [v for c, v in table.items() if v is not None and pred(c)]
        return min(vals) if vals else float("nan")

    def bl(c):
        m = re.match(r"p\d+_b(\d+)_kv(\d+)", c)
        return int(m.group(1)), int(m.group(2))

    groups = [("b>=4 kv>=4K (goal 0.85)", lambda c: bl(c)[0] >= 4 and bl(c)[1] >= 4096),
              ("b1 kv>=16K (goal 0.70)", lambda c: bl(c)[0] == 1 and bl(c)[1] >= 16384)]
    for name, pred in groups:
        line = f"min {name}: auto {group_min(auto, pred):.3f}"
        line += "".join(f", s{n} {group_min(forced[n], pred):.3f}" for n in counts)
        line += f", best per config {group_min(best, pred):.3f}"
        print(line)


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    main(sys.argv[1:])
