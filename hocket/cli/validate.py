"""`hocket validate`: the cost model against committed results lines (held-out split), or against published
figures (``--published``), or the planner's model-error allowances derived from them (``--allowances``).

Reads the results files and folders given (every ``*.jsonl`` under a folder; default: ``benchmarks/results`` of
the current folder, a checkout's root) and prices each line with ``hocket.strategies.predict``. A third of the
sites is held out by a frozen split and never calibrates; each line is priced as its executor ran and in its
timing mode (steady state, CUDA graph replay). Printed per cluster: the held-out points, the median and max
error, how often the sign of the saving over sequential is right, how often the predicted best plan is the
measured best, and the run-to-run noise (``hocket.validate.cost_model``; docs/validation.md).

  hocket validate --lease-only                         # each lease's lines with that lease's profile
  hocket validate benchmarks/results/cpu --profile benchmarks/results/calibration/cpu-gloo-w2.json
  hocket validate --allowances --lease-profiles         # hocket.plan.uncertainty's DEFAULT_REL_ERROR
  hocket validate --published                           # presets alone against published figures
"""

from __future__ import annotations

import argparse
import json
import sys


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "validate", help="the cost model against committed results lines (held out) or published figures",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*",
                        help="results JSON-lines files or folders (default: every *.jsonl under benchmarks/results)")
    parser.add_argument("--cluster", default=None, help="cluster preset or YAML every line was measured on")
    parser.add_argument("--profile", action="append", default=[],
                        help="a calibration profile to merge in (repeatable: each applies to the sites measured "
                             "on its devices' models)")
    parser.add_argument("--holdout", type=float, default=1 / 3, help="fraction of sites held out (>= 1/3)")
    parser.add_argument("--no-calibration", action="store_true",
                        help="predict from the profiles and presets only (no baselines of the calibration sites)")
    parser.add_argument("--all-points", action="store_true", help="print the calibration sites' points too")
    parser.add_argument("--all-relays", action="store_true",
                        help="also price host_staged lines of earlier relays and executors")
    parser.add_argument("--lease-profiles", action="store_true",
                        help="price each results file's lines with the profile hocket calibrate made on the same "
                             "lease (profile.json / profile_host.json beside it) where it left one, that profile "
                             "alone; other lines as without the flag")
    parser.add_argument("--lease-only", action="store_true",
                        help="--lease-profiles, and skip the lines of leases that left no profile")
    parser.add_argument("--json", default=None, metavar="FILE",
                        help="also write the tables (points, decisions, summaries) as JSON to FILE")
    mode = parser.add_argument_group("instead of the validation")
    what = mode.add_mutually_exclusive_group()
    what.add_argument("--allowances", action="store_true",
                      help="derive hocket.plan.uncertainty's per-class model-error allowance from the calibration "
                           "sites (priced with the profiles alone)")
    what.add_argument("--published", action="store_true",
                      help="price cluster presets, without a profile, against published GEMM and collective "
                           "figures (no results lines read)")
    mode.add_argument("--percentile", type=float, default=75.0,
                      help="with --allowances: the percentile of the model error per plan class (default 75)")
    parser.set_defaults(func=run, parser=parser)


def run(args) -> int:
    parser = args.parser
    if args.published:
        given = [name for name, on in (("paths", args.paths), ("--profile", args.profile), ("--cluster", args.cluster),
                                       ("--lease-profiles", args.lease_profiles), ("--lease-only", args.lease_only))
                 if on]
        if given:
            parser.error(f"--published prices presets alone: drop {', '.join(given)}")
        from hocket.validate.published import print_published, rows, write_json

        table = rows()
        print_published(table)
        if args.json:
            write_json(table, args.json)
        return 0
    if not 1 / 3 - 1e-9 <= args.holdout < 1:
        parser.error(f"--holdout {args.holdout} must be in [1/3, 1): a third of the sites at least stay out")
    if not 0.0 <= args.percentile <= 100.0:
        parser.error(f"--percentile {args.percentile} must be in [0, 100]")
    from hocket.validate.lines import results_paths

    try:
        paths = results_paths(args.paths)
    except FileNotFoundError as exc:
        print(f"hocket validate: {exc}", file=sys.stderr)
        return 2
    if args.allowances:
        if args.lease_only or args.no_calibration or args.all_points:
            parser.error("--allowances prices with the profiles alone: drop --lease-only, --no-calibration and "
                         "--all-points")
        from hocket.validate.allowances import derive_allowances, print_allowances

        result = derive_allowances(paths, profiles=args.profile, cluster=args.cluster, percentile_q=args.percentile,
                                   lease_profiles=args.lease_profiles, holdout=args.holdout,
                                   all_relays=args.all_relays)
        print_allowances(result)
        if args.json:
            with open(args.json, "w", encoding="utf-8") as handle:
                json.dump(result, handle, indent=1)
                handle.write("\n")
        return 0
    from hocket.validate.cost_model import print_validation, validate, write_json

    report = validate(paths, cluster=args.cluster, profiles=args.profile, holdout=args.holdout,
                      no_calibration=args.no_calibration, all_relays=args.all_relays,
                      lease_profiles=args.lease_profiles, lease_only=args.lease_only)
    print_validation(report, all_points=args.all_points)
    if args.json:
        write_json(report, args.json)
    return 0
