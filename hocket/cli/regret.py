"""`hocket regret`: the planner's choice against the best measured plan of every measured site.

For each site of the results files and folders given (every ``*.jsonl`` under a folder; default:
``benchmarks/results`` of the current folder, a checkout's root): the measured time of the plan chosen by
prediction alone (autotune off) over the best measured plan, the same with autotune on (top-k predicted plus
sequential, decided by measurement), and both against measured sequential. Targets: prediction-alone regret
<= 1.05; never slower than sequential beyond noise (``hocket.validate.regret``; docs/validation.md).

The cluster each line was measured on is found by matching its hardware fingerprint against this machine's
probe and the presets; ``--cluster`` names it instead.

  hocket regret --lease-profiles --profile benchmarks/results/calibration/h200x2-nccl-full.json
  hocket regret --lease-profiles --per-run          # every run on its own
  hocket regret benchmarks/results/h200x2 --cluster h200x2 --json regret.json
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hocket.cli._ranks import positive_int


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "regret", help="the planner's choice (predicted, autotuned) against the best measured plan",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*",
                        help="results JSON-lines files or folders (default: every *.jsonl under benchmarks/results)")
    parser.add_argument("--cluster", default=None, help="cluster preset or YAML all lines were measured on")
    parser.add_argument("--profile", default=None, help="calibration profile JSON to predict with (that machine's)")
    parser.add_argument("--top-k", type=positive_int, default=4,
                        help="plans autotuning times besides sequential (default 4)")
    parser.add_argument("--margin", type=float, default=0.03, help="saving a plan needs over sequential")
    parser.add_argument("--no-uncertainty", action="store_true",
                        help="prediction alone with the plain margin (no per-class model-error allowance)")
    parser.add_argument("--holdout", choices=("all", "held-out", "calibration"), default="all",
                        help="score every site, or only hocket validate's held-out third (or the rest)")
    parser.add_argument("--all-relays", action="store_true",
                        help="also score host_staged lines of earlier relays and executors (by default they are "
                             "skipped: no executor runs them any more)")
    parser.add_argument("--lease-profiles", action="store_true",
                        help="price each site with the profile calibrated on the lease of its newest line "
                             "(profile.json / profile_host.json beside it) where that lease kept one; --profile "
                             "elsewhere")
    parser.add_argument("--captured", action="store_true",
                        help="score the lines of calls replayed from CUDA graphs, priced as such, instead of the "
                             "eager ones")
    parser.add_argument("--per-run", action="store_true",
                        help="score each run (a results file, and within it each measurement of a site's "
                             "sequential baseline) on its own (with --lease-profiles: priced with that run's lease "
                             "profile); by default the runs of one machine are pooled, newest line per plan")
    parser.add_argument("--json", default=None, metavar="FILE", help="also write the rows as JSON to FILE")
    parser.set_defaults(func=run)


def run(args) -> int:
    from hocket.validate.lines import results_paths
    from hocket.validate.regret import print_regret, regret, write_json

    try:
        paths = results_paths(args.paths)
    except FileNotFoundError as exc:
        print(f"hocket regret: {exc}", file=sys.stderr)
        return 2
    strict = bool(args.paths) and all(Path(p).is_file() for p in args.paths)  # a folder may hold other files
    result = regret(paths, cluster=args.cluster, profile=args.profile, top_k=args.top_k, margin=args.margin,
                    uncertainty=not args.no_uncertainty, holdout=args.holdout, all_relays=args.all_relays,
                    lease_profiles=args.lease_profiles, captured=args.captured, per_run=args.per_run, strict=strict)
    print_regret(result)
    if args.json:
        write_json(result, args.json)
    return 0
