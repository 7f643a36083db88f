"""Pair bench_single_gpu.py lines of two commits measured in alternating rounds on one lease.

    python -m benchmarks.paired_commits --base base_r1.jsonl base_r2.jsonl ... --main main_r1.jsonl main_r2.jsonl ...

A line's key is (site kind, m x k x n, variant, plan); round i of base pairs with round i of main, and a
case (kind and shape) reports the median over its lines and rounds of main's speed relative to base
(base_ms / main_ms: above 1 means main is faster) and the plan=None ('planner') line's ratio alone,
with both trees' overlap efficiencies of that line.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections import defaultdict


def lines(path: str) -> dict[tuple, dict]:
    out = {}
    with open(path) as fh:
        for raw in fh:
            d = json.loads(raw)
            site, plan = d["site"], d["plan"]
            plan = {k: v for k, v in plan.items() if v is not None and k != "version"}
            key = (site["kind"], f"{site['m']}x{site['k']}x{site['n']}", d["run"].get("variant", "-"),
                   json.dumps(plan, sort_keys=True))
            out[key] = d
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", nargs="+", required=True)
    parser.add_argument("--main", nargs="+", required=True)
    args = parser.parse_args()
    if len(args.base) != len(args.main):
        parser.error("give as many --base rounds as --main rounds")
    ratios: dict[tuple, list[float]] = defaultdict(list)
    planner: dict[tuple, list[tuple[float, float, float, float]]] = defaultdict(list)
    for base_path, main_path in zip(args.base, args.main):
        base, head = lines(base_path), lines(main_path)
        for key in sorted(set(base) & set(head)):
            b, m = base[key], head[key]
            case = key[:2]
            ratios[case].append(b["median_ms"] / m["median_ms"])
            if key[2] == "planner":
                planner[case].append((b["median_ms"], m["median_ms"], b.get("overlap_efficiency") or 0.0,
                                      m.get("overlap_efficiency") or 0.0))
    print("| case | lines x rounds | median base/main (all lines) | min | plan=None base ms | main ms | "
          "base/main | eff base | eff main |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in sorted(ratios):
        r = ratios[case]
        p = planner.get(case) or []
        if p:
            bm = statistics.median(x[0] for x in p)
            mm = statistics.median(x[1] for x in p)
            cells = (f"{bm:.3f}", f"{mm:.3f}", f"{statistics.median(x[0] / x[1] for x in p):.3f}",
                     f"{statistics.median(x[2] for x in p):.2f}", f"{statistics.median(x[3] for x in p):.2f}")
        else:
            cells = ("-",) * 5
        print(f"| {case[0]} {case[1]} | {len(r)} | {statistics.median(r):.3f} | {min(r):.3f} | " + " | ".join(cells)
              + " |")


if __name__ == "__main__":
    main()
