"""The per-class model-error allowances of ``hocket.plan.uncertainty`` (``DEFAULT_REL_ERROR``), derived from
committed measurements: ``hocket validate --allowances``.

For every measured plan of the validation's *calibration* sites (its frozen split, :mod:`hocket.validate.sites`;
held-out sites are never read), with the machine profiles given (sites of other machines are skipped; with none,
every machine is read, predicted from presets only):

    e = (measured_plan / measured_sequential) / (predicted_plan / predicted_sequential) - 1
        - per_piece_error * (pieces - 1)

i.e. how much slower, relative to sequential, the plan ran than the model said, less the per-piece allowance
:class:`hocket.plan.uncertainty.Uncertainty` adds on top of the class constant. Per plan class
(:func:`hocket.plan.uncertainty.plan_class`) the constant is the ``percentile`` (default 75th) of ``e``, floored at
0 (a class the model over-prices keeps no allowance) and capped at ``DEFAULT_MAX_ERROR``. Classes without a
calibration point keep the constant in the module.

With ``lease_profiles`` each results file is priced with the profile ``hocket calibrate`` measured on its own
lease (:func:`hocket.validate.lines.lease_profile_path`) where it kept one, the given profiles elsewhere. A plan
whose profile did not measure its class (``hocket.plan.uncertainty.calibrated_classes``: e.g. a relay between
ranks priced without the relay's curve) does not count toward the constant; those plans are reported apart
(``DEFAULT_UNCALIBRATED_REL_ERROR``). A copy-engine ``chunked`` line is priced with the peer protocol it ran.
Predictions use the profile alone (as the planner does on that machine), never the calibration sites' own
baselines, so the error is the one the planner meets.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from hocket.cost.calibration import calibration_view
from hocket.hardware import load_cluster
from hocket.hardware.profile import load_profile
from hocket.plan.uncertainty import (
    DEFAULT_MAX_ERROR,
    DEFAULT_PER_PIECE_ERROR,
    DEFAULT_REL_ERROR,
    DEFAULT_UNCALIBRATED_FACTOR,
    PLAN_CLASSES,
    calibrated_classes,
    plan_class,
    plan_pieces,
)
from hocket.strategies import predict
from hocket.validate.lines import lease_profile_path, line_label, plan_as_ran, read_current
from hocket.validate.sites import group_sites, machine_of, profile_for, split_holdout


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


def class_errors(groups, profiles, *, per_piece_error: float
                 ) -> tuple[dict[str, list[float]], dict[str, list[float]], list[str]]:
    """Per plan class: the under-pricing ``e`` (module doc) of every priced plan of ``groups`` whose
    profile measured that class (``calibrated_classes``; every plan without profiles), and of those
    whose profile did not (what ``DEFAULT_UNCALIBRATED_REL_ERROR`` is derived from)."""
    errors: dict[str, list[float]] = {c: [] for c in PLAN_CLASSES if c != "sequential"}
    uncalibrated: dict[str, list[float]] = {}
    notes: list[str] = []
    for g in groups:
        profile = profile_for(machine_of(g), profiles)
        if profiles and profile is None:  # e.g. CPU ranks: an H200 profile says nothing about them
            notes.append(f"{machine_of(g)} site runs skipped: no --profile of that machine")
            continue
        view = calibration_view(profile)
        # sequential as the planner's own baseline on the line's cluster (on a slow-link cluster: the relay's
        # bulk call, not the NCCL-through-host baseline the validation prices with SiteGroup.pricing)
        seq_plan = g.sequential_plan()
        try:
            predicted_seq = predict(g.site, seq_plan, g.cluster, view, steady_state=g.steady,
                                    captured=g.captured).total_ms
        except ValueError as exc:
            notes.append(f"{g.site.key}: sequential not priced: {str(exc)[:120]}")
            continue
        measured_seq = g.sequential_ms
        for r in g.records:
            plan = g.priced(plan_as_ran(r))  # with the peer protocol the line ran
            cls = plan_class(plan)
            if cls == "sequential":
                continue
            measured_class = profile is None or cls in calibrated_classes(profile, g.site.world)
            try:
                predicted = predict(g.site, plan, g.cluster, view, steady_state=g.steady,
                                    captured=g.captured).total_ms
            except ValueError as exc:
                notes.append(f"{g.site.key} {line_label(r)}: not priced: {str(exc)[:120]}")
                continue
            ratio = (r.median_ms / measured_seq) / (predicted / predicted_seq)
            e = ratio - 1.0 - per_piece_error * (plan_pieces(plan) - 1)
            (errors[cls] if measured_class else uncalibrated.setdefault(cls, [])).append(e)
    return errors, uncalibrated, notes


def derive_allowances(paths, *, profiles=(), cluster: str | None = None, percentile_q: float = 75.0,
                      lease_profiles: bool = False, holdout: float = 1 / 3, all_relays: bool = False) -> dict:
    """The allowances derived from the calibration sites of the results files ``paths``: ``{"derived": {class:
    constant}, "errors": {class: [e]}, "uncalibrated": {class: [e]}, "runs": calibration site runs read,
    "held_out_runs": held-out site runs left unread, "notes": [...], "options": {...}}``.

    ``profiles``: paths of machine calibration profiles; ``cluster``: the preset or YAML every line was measured
    on; ``percentile_q``: the percentile of ``e`` per class; ``lease_profiles``: the module doc; ``holdout``: the
    fraction of sites the split holds out; ``all_relays``: also read host_staged lines of earlier relays."""
    paths = [Path(p) for p in paths]
    profile_names = [str(p) for p in profiles]
    fallback = [p for p in (load_profile(path, expected=None) for path in profiles) if p is not None]
    batches: list[tuple[list[Path], list]] = []  # (files, profiles) priced together
    rest = list(paths)
    if lease_profiles:
        rest = []
        for path in paths:
            lease = lease_profile_path(path)
            profile = load_profile(lease, expected=None) if lease is not None else None
            if profile is None:
                rest.append(path)
            else:
                batches.append(([path], [profile]))
    if rest:
        batches.append((rest, fallback))
    errors: dict[str, list[float]] = {c: [] for c in PLAN_CLASSES if c != "sequential"}
    uncalibrated: dict[str, list[float]] = {}
    notes: list[str] = []
    runs = held = 0
    forced = load_cluster(cluster) if cluster else None
    for files, batch_profiles in batches:
        records, read_notes = read_current(files, all_relays=all_relays)
        notes += read_notes
        groups, more = group_sites(records, forced)
        calibration, held_out = split_holdout(groups, holdout)
        found, unmeasured, priced = class_errors(calibration, batch_profiles, per_piece_error=DEFAULT_PER_PIECE_ERROR)
        for cls, values in found.items():
            errors.setdefault(cls, []).extend(values)
        for cls, values in unmeasured.items():
            uncalibrated.setdefault(cls, []).extend(values)
        notes += more + priced
        runs, held = runs + len(calibration), held + len(held_out)
    return {"derived": derive_constants(errors, percentile_q), "errors": errors, "uncalibrated": uncalibrated,
            "runs": runs, "held_out_runs": held, "notes": sorted(set(notes)),
            "options": {"profiles": profile_names, "percentile": percentile_q, "lease_profiles": lease_profiles}}


def print_allowances(result: dict) -> None:
    """Print :func:`derive_allowances`' result: per class the points, the median and percentile of ``e``, the
    derived constant and the module's, then the ``DEFAULT_REL_ERROR`` line to paste and the notes."""
    o, q = result["options"], result["options"]["percentile"]
    print(f"calibration site runs: {result['runs']} (held-out runs left unread: {result['held_out_runs']}); "
          f"profiles: {'each lease its own where it left one, else ' if o['lease_profiles'] else ''}"
          f"{', '.join(o['profiles']) or 'none'}; per-piece allowance {DEFAULT_PER_PIECE_ERROR}")
    print(f"{'class':<12} {'plans':>5} {'median e':>9} {f'p{q:g} e':>8} {'constant':>9} {'was':>6}")
    derived = result["derived"]
    for cls, values in result["errors"].items():
        if values:
            print(f"{cls:<12} {len(values):>5} {statistics.median(values):>+9.3f} "
                  f"{percentile(values, q):>+8.3f} {derived[cls]:>9.2f} {DEFAULT_REL_ERROR[cls]:>6.2f}")
        else:
            print(f"{cls:<12} {0:>5} {'-':>9} {'-':>8} {derived[cls]:>9.2f} {DEFAULT_REL_ERROR[cls]:>6.2f}  "
                  f"(no points: kept)")
    print("DEFAULT_REL_ERROR = {" + ", ".join(f'"{c}": {derived[c]}' for c in PLAN_CLASSES) + "}")
    if result["uncalibrated"]:
        print(f"plans whose profile did not measure their class (the planner's error there: "
              f"DEFAULT_UNCALIBRATED_REL_ERROR, else {DEFAULT_UNCALIBRATED_FACTOR} x the constant):")
        for cls, values in sorted(result["uncalibrated"].items()):
            print(f"{cls:<12} {len(values):>5} {statistics.median(values):>+9.3f} "
                  f"{percentile(values, q):>+8.3f} "
                  f"{min(max(percentile(values, q), 0.0), DEFAULT_MAX_ERROR):>9.2f}")
    for note in result["notes"]:
        print(f"note: {note}")
