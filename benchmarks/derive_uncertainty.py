"""Derive ``hocket.plan.uncertainty.DEFAULT_REL_ERROR`` from committed measurements.

For every measured plan of validate_cost.py's *calibration* sites (its frozen split;
held-out sites are never read), with the machine profile given by ``--profile`` (sites of other machines are
skipped; without ``--profile`` every machine is read, predicted from presets only):

    e = (measured_plan / measured_sequential) / (predicted_plan / predicted_sequential) - 1
        - per_piece_error * (pieces - 1)

i.e. how much slower, relative to sequential, the plan ran than the model said, less
the per-piece allowance :class:`hocket.plan.uncertainty.Uncertainty` adds on top of the
class constant. Per plan class (:func:`hocket.plan.uncertainty.plan_class`) the printed
constant is the ``--percentile`` (default 75th) of ``e``, floored at 0 (a class the
model over-prices keeps no allowance) and capped below ``max_error``. Classes without
a calibration point keep the constant in the module (said so in the output).

  python benchmarks/derive_uncertainty.py --profile benchmarks/results/calibration/h200x2-nccl-full.json

A copy-engine ``chunked`` line is priced with the peer protocol it ran (validate_cost.line_protocol).
Predictions use the profile alone (as the planner does on that machine), never the
calibration sites' own baselines, so the error is the one the planner meets.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from hocket.cost import predict
from hocket.cost.calibration import calibration_view
from hocket.hardware import load_cluster
from hocket.hardware.profile import load_profile
from hocket.plan.uncertainty import (DEFAULT_MAX_ERROR, DEFAULT_PER_PIECE_ERROR, DEFAULT_REL_ERROR, PLAN_CLASSES,
                                     plan_class, plan_pieces)
from validate_cost import (RESULTS, group_sites, line_label, machine_of, priced_as_ran,
                           profile_for, read_current, split_holdout)


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linear between order statistics."""
    if not values:
        raise ValueError("percentile of an empty list: pass at least one value")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} must be in [0, 100]")
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def derive_constants(errors: dict[str, list[float]], q: float) -> dict[str, float]:
    """The allowance per plan class: the ``q``-th percentile of the class's ``e`` (module doc),
    floored at 0, capped at ``DEFAULT_MAX_ERROR`` and rounded to 0.01; a class without points
    keeps its ``DEFAULT_REL_ERROR`` constant, and sequential is 0."""
    derived = {"sequential": 0.0}
    for cls, values in errors.items():
        if values:
            derived[cls] = round(min(max(percentile(values, q), 0.0), DEFAULT_MAX_ERROR), 2)
        else:
            derived[cls] = DEFAULT_REL_ERROR[cls]
    return derived


def class_errors(groups, profiles, *, per_piece_error: float) -> tuple[dict[str, list[float]], list[str]]:
    """Per plan class: the under-pricing ``e`` (module doc) of every priced plan of ``groups``."""
    errors: dict[str, list[float]] = {c: [] for c in PLAN_CLASSES if c != "sequential"}
    notes: list[str] = []
    for g in groups:
        profile = profile_for(machine_of(g), profiles)
        if profiles and profile is None:  # e.g. CPU ranks: an H200 profile says nothing about them
            notes.append(f"{machine_of(g)} site runs skipped: no --profile of that machine")
            continue
        view = calibration_view(profile)
        seq_plan = g.sequential_plan()
        try:
            predicted_seq = predict(g.site, seq_plan, g.cluster, view, steady_state=g.steady).total_ms
        except ValueError as exc:
            notes.append(f"{g.site.key}: sequential not priced: {str(exc)[:120]}")
            continue
        measured_seq = g.sequential_ms
        for r in g.records:
            plan = g.priced(r.plan)
            cls = plan_class(plan)
            if cls == "sequential":
                continue
            try:
                with priced_as_ran(r):  # the copy-engine protocol and relay signalling the line ran
                    predicted = predict(g.site, plan, g.cluster, view, steady_state=g.steady).total_ms
            except ValueError as exc:
                notes.append(f"{g.site.key} {line_label(r)}: not priced: {str(exc)[:120]}")
                continue
            ratio = (r.median_ms / measured_seq) / (predicted / predicted_seq)
            errors[cls].append(ratio - 1.0 - per_piece_error * (plan_pieces(plan) - 1))
    return errors, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="results JSON-lines files (default: every *.jsonl under results/)")
    parser.add_argument("--profile", action="append", default=[], help="machine calibration profile (repeatable)")
    parser.add_argument("--cluster", default=None, help="cluster preset or YAML every line was measured on")
    parser.add_argument("--percentile", type=float, default=75.0, help="percentile of e per class (default 75)")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.paths] or sorted(RESULTS.rglob("*.jsonl"))
    records, read_notes = read_current(paths)
    for note in read_notes:
        print(f"note: {note}")
    groups, notes = group_sites(records, load_cluster(args.cluster) if args.cluster else None)
    calibration, held_out = split_holdout(groups, 1 / 3)
    profiles = [p for p in (load_profile(path, expected=None) for path in args.profile) if p is not None]
    errors, more = class_errors(calibration, profiles, per_piece_error=DEFAULT_PER_PIECE_ERROR)
    print(f"calibration site runs: {len(calibration)} (held-out runs left unread: {len(held_out)}); "
          f"profiles: {', '.join(args.profile) or 'none'}; per-piece allowance {DEFAULT_PER_PIECE_ERROR}")
    print(f"{'class':<12} {'plans':>5} {'median e':>9} {f'p{args.percentile:g} e':>8} {'constant':>9} {'was':>6}")
    derived = derive_constants(errors, args.percentile)
    for cls, values in errors.items():
        if values:
            print(f"{cls:<12} {len(values):>5} {statistics.median(values):>+9.3f} "
                  f"{percentile(values, args.percentile):>+8.3f} {derived[cls]:>9.2f} {DEFAULT_REL_ERROR[cls]:>6.2f}")
        else:
            print(f"{cls:<12} {0:>5} {'-':>9} {'-':>8} {derived[cls]:>9.2f} {DEFAULT_REL_ERROR[cls]:>6.2f}  (no points: kept)")
    print("DEFAULT_REL_ERROR = {" + ", ".join(f'"{c}": {derived[c]}' for c in PLAN_CLASSES) + "}")
    for note in sorted(set(notes + more)):
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
