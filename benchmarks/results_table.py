"""Print results JSON lines (the schema of DESIGN.md section 4) as a Markdown table.

    python benchmarks/results_table.py benchmarks/results/gloo_world2.jsonl [more.jsonl ...]

One row per line: site, plan, median (p10-p90) ms, the three baselines and the score
(overlap efficiency, or the speedup over sequential where overlap could save < 15%).
"""

from __future__ import annotations

import argparse

from hocket.bench.record import read_records


def markdown_rows(paths: list[str]) -> list[str]:
    header = ("| op | m×k×n | dtype | plan | median ms (p10–p90) | sequential ms | compute-alone ms | comm-alone ms "
              "| overlap eff. / speedup |")
    rows = [header, "|---" * (header.count("|") - 1) + "|"]
    for path in paths:
        for r in read_records(path):
            s, score, base = r.site, r.score(), r.baselines
            value = "—" if r.plan.strategy == "sequential" else score.label()
            rows.append(f"| {s.kind} | {s.m}×{s.k}×{s.n} | {s.dtype} | {r.plan.describe()} | "
                        f"{r.timing.median_ms:.2f} ({r.timing.p10_ms:.2f}–{r.timing.p90_ms:.2f}) | "
                        f"{base.sequential_ms:.2f} | {base.compute_alone_ms:.2f} | {base.comm_alone_ms:.2f} | {value} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="+", help="results .jsonl files")
    print("\n".join(markdown_rows(parser.parse_args().paths)))


if __name__ == "__main__":
    main()
