"""The cost model against committed measurements: ``hocket validate``.

Results lines (``hocket.bench.record``) are grouped by measured site (:mod:`hocket.validate.sites`), and a third
of the sites is held out by a frozen split: their measurements never calibrate. The calibration profile the model
predicts with is built from the *other* sites' baselines only (``compute_alone_ms`` -> GEMM points,
``comm_alone_ms`` -> transfer curve points), optionally merged with a machine profile (``hocket calibrate``'s, on
separate microbenchmarks). No plan's overlapped time ever calibrates, so every strategy's prediction is a
held-out prediction of its mechanism.

Steady-state lines (``run.reps > 1``) are priced with GEMMs under the sustained ceiling (the profile's
``gemm_sustained``, ``hocket.cost.compute``). A profile without that field gets a derived one
(:func:`derived_sustained`, from the calibration sites only). Steady compute-alone baselines are GEMM points as
measured; steady comm-alone baselines (timed back to back) are ``collectives_steady`` points, which steady
predictions read (``CalibrationView.for_steady_state``), from-idle ones ``collectives`` points. A ``chunked``
plan over ``copy_engine`` is priced with the peer protocol its line ran (:func:`hocket.validate.lines.plan_as_ran`).

Reported (:func:`validate`, printed by :func:`print_validation`): per-point error, median and max relative error,
how often the predicted sign of the saving over sequential matches the measured one (points whose measured saving
is within the noise counted apart), and how often the predicted best plan of a site is the measured best (with the
regret of following the prediction). Targets: median <= 10%, max <= 25%, sign right >= 90%. Where the model
stands: benchmarks/results/validation/2026-12-01_cost-model.md.

With ``lease_profiles`` each results file's lines are priced with the profile ``hocket calibrate`` made on the
same lease (``profile.json``/``profile_host.json`` beside it, :func:`hocket.validate.lines.lease_profile_path`)
where one exists, that profile alone (host issue costs and curves differ up to 2x between leases of one machine
kind); ``lease_only`` also skips the lines of leases that left none. The held-out split is the same.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from hocket.bench.noise import percent, print_noise
from hocket.bench.noise import run_to_run as noise_floor
from hocket.cost.calibration import CalibrationView, calibration_view
from hocket.cost.compute import gemm_ms
from hocket.hardware import load_cluster
from hocket.hardware.profile import CalibrationProfile, CurvePoint, GemmPoint, SustainedGemm, load_profile
from hocket.strategies import predict
from hocket.validate.lines import (
    lease_profile_path,
    line_label,
    line_own_sum,
    line_own_zero,
    line_protocol,
    plan_as_ran,
    read_current,
)
from hocket.validate.sites import SiteGroup, group_sites, machine_of, profile_for, split_holdout

CURVE_OF_KIND = {"ag_mm": "all_gather", "mm_rs": "reduce_scatter", "mm_ar": "all_reduce",
                 "h2d_mm": "host_link", "mm_d2h": "host_link"}


NOISE_FLOOR = 0.02
"""A measured saving smaller than this fraction of sequential (or than the p10-p90 spread) is noise."""
SUSTAINED_MIN_MS = 0.5
"""A calibration site feeds the derived sustained ceiling when the profile prices its whole GEMM at
this many ms or more in a burst: a large GEMM, as ``hocket calibrate`` runs one back to back."""
CAP_BOUND = 1.02
"""A steady run is held by the power cap when its compute-alone is this much slower than the profile's
burst price of the same GEMM (below it: the GEMM runs under the ceiling, or the grid is off at its shape)."""


def derived_sustained(groups: list[SiteGroup], base: CalibrationProfile | None) -> SustainedGemm | None:
    """The sustained GEMM ceiling of a profile without a measured one, from ``groups`` (the calibration
    sites only): among the steady runs of large GEMMs (``SUSTAINED_MIN_MS``) on GPU ranks that ran
    ``CAP_BOUND`` slower than ``base``'s burst price, the run of median rate (lower median), as a
    ``SustainedGemm`` (burst: the profile's price; sustained: the run's compute-alone; ``duration_s``:
    the time its samples ran back to back). None with no base, a base that measured it, or no such run."""
    if base is None or base.gemm_sustained is not None:
        return None
    view = CalibrationView(base)
    held = []
    for g in groups:
        site, record = g.site, g.records[0]
        device = g.cluster.device(0)  # the lines' clusters are of one device model (machine_of)
        if not g.steady or device.sm_count is None:
            continue
        n = site.n * site.num_b
        burst_ms = gemm_ms(device, m=site.m, k=site.k, n=n, dtype=site.dtype, itemsize=site.itemsize,
                           calibration=view)
        ms = record.baselines.compute_alone_ms
        if burst_ms >= SUSTAINED_MIN_MS and ms >= CAP_BOUND * burst_ms:
            held.append((site.flops / ms, burst_ms, site, n, record))
    if not held:
        return None
    held.sort(key=lambda x: x[0])
    _, burst_ms, site, n, record = held[(len(held) - 1) // 2]
    ms = record.baselines.compute_alone_ms
    return SustainedGemm(m=site.m, k=site.k, n=n, dtype=site.dtype, burst_ms=burst_ms, sustained_ms=ms,
                         duration_s=record.timing.n * record.run["reps"] * ms / 1e3)


def calibration_profile(groups: list[SiteGroup], base: CalibrationProfile | None) -> CalibrationProfile:
    """A profile from the calibration sites' baselines (plus ``base``'s points), with ``base``'s
    sustained GEMM ceiling or one derived from the same sites (``derived_sustained``)."""
    sustained = base.gemm_sustained if base and base.gemm_sustained else derived_sustained(groups, base)
    gemm = list(base.gemm) if base else []
    curves: dict[str, list] = {op: list(points) for op, points in (base.collectives if base else {}).items()}
    steady_curves: dict[str, list] = {op: list(points) for op, points in
                                      (base.collectives_steady if base else {}).items()}
    host = list(base.host_link) if base else []
    for g in groups:
        site, baselines = g.site, g.records[0].baselines
        gemm.append(GemmPoint(m=site.m, k=site.k, n=site.n * site.num_b, dtype=site.dtype,
                              tflops=site.flops / (baselines.compute_alone_ms * 1e9), ms=baselines.compute_alone_ms))
        point = CurvePoint(bytes=site.comm_bytes, ms=baselines.comm_alone_ms)
        curve = CURVE_OF_KIND[site.kind]
        if curve == "host_link":
            host.append(point)
        elif g.measures_collective():  # a steady run's comm-alone was timed back to back
            (steady_curves if g.steady else curves).setdefault(curve, []).append(point)
    return CalibrationProfile(
        fingerprint=base.fingerprint if base else "hocket.validate", world_size=base.world_size if base else 1,
        gemm=tuple(gemm), collectives={op: tuple(sorted(p, key=lambda x: x.bytes)) for op, p in curves.items()},
        collectives_steady={op: tuple(sorted(p, key=lambda x: x.bytes)) for op, p in steady_curves.items()},
        p2p=base.p2p if base else (), copy_engine=base.copy_engine if base else (),
        host_link=tuple(sorted(host, key=lambda x: x.bytes)), contention=base.contention if base else {},
        issue_us=base.issue_us if base else {}, gemm_sustained=sustained)


def sustained_note(profile: CalibrationProfile, base: CalibrationProfile | None) -> str:
    """Where the sustained GEMM ceiling of a table came from (printed in its header)."""
    s = profile.gemm_sustained
    if s is None:
        return "sustained GEMM ceiling: none (steady lines priced at the profile's burst level: no steady calibration " \
            "run of a large GPU GEMM held by the power cap)" if base else \
            "sustained GEMM ceiling: none (no profile: the datasheet level is sustained)"
    how = "measured by hocket calibrate" if base is not None and base.gemm_sustained is s else \
        f"derived from the calibration sites only (median steady run among GEMMs >= {SUSTAINED_MIN_MS} ms slower " \
        f"than the profile's burst price; held-out sites never feed it)"
    return f"sustained GEMM ceiling {s.tflops:.0f} TFLOP/s at {s.m}x{s.k}x{s.n} ({s.burst_ms:.3f} ms burst price, " \
        f"{s.sustained_ms:.3f} ms back to back), {how}"


def evaluate(groups: list[SiteGroup], view: CalibrationView | None, lease_views: dict | None = None) -> dict:
    """Every line of ``groups`` priced with ``view``, or with ``lease_views[group.key]`` where the group's
    lease left a profile (``--lease-profiles``)."""
    points, signs, bests, unpriced = [], [], [], []
    default_view = view
    for g in groups:
        view = (lease_views or {}).get(g.key, default_view)
        try:
            seq_plan, seq_cluster = g.pricing(g.sequential_ran(), view)
            predicted_seq = predict(g.site, seq_plan, seq_cluster, view, steady_state=g.steady,
                                    captured=g.captured).total_ms
        except ValueError as exc:  # e.g. NCCL through host memory on a cluster that offers only host_staged
            predicted_seq = None
            unpriced.append(f"{g.site.key} sequential on {g.cluster.name} (no saving signs for this run): {exc}")
        measured_seq = g.sequential_ms
        per_plan = []
        for r in g.records:
            label = line_label(r)
            try:
                plan, cluster = g.pricing(plan_as_ran(r), view)  # with the peer protocol it ran
                pred = predict(g.site, plan, cluster, view, steady_state=g.steady, captured=g.captured).total_ms
            except ValueError as exc:  # a plan the model does not price (named in the message)
                unpriced.append(f"{g.site.key} {label}: {exc}")
                continue
            error = pred / r.median_ms - 1.0
            points.append({"site": g.site.key, "plan": label, "peer_protocol": line_protocol(r),
                           "measured_ms": r.median_ms, "predicted_ms": pred, "error": error})
            per_plan.append((r, pred))
            if r.plan.strategy == "sequential" or predicted_seq is None:
                continue
            noise = max(NOISE_FLOOR, (r.timing.p90_ms - r.timing.p10_ms) / r.median_ms)
            measured_saving = (measured_seq - r.median_ms) / measured_seq
            predicted_saving = (predicted_seq - pred) / predicted_seq
            signs.append({"site": g.site.key, "plan": label, "measured": measured_saving,
                          "predicted": predicted_saving, "within_noise": abs(measured_saving) < noise,
                          "right": (measured_saving > 0) == (predicted_saving > 0)})
        if not per_plan:
            continue
        bests.append(best_of(g.site.key, per_plan))
    return {"points": points, "signs": signs, "bests": bests, "unpriced": unpriced}


def best_of(site_key: str, per_plan: list) -> dict:
    """The measured-best and predicted-best plan of one site group's priced lines ``(record,
    predicted ms)``, and the regret of following the prediction. A plan measured on several lines
    (the bench times the planner's choice again after its candidates) counts once, at the median of
    its lines, on both sides (taking the predicted plan at its first line and the best at its fastest would
    count one plan timed at 0.343 and 0.218 ms as a 1.57 regret against itself)."""
    by_label: dict[str, list] = {}
    for record, pred in per_plan:
        by_label.setdefault(line_label(record), []).append((record, pred))
    measured = {label: statistics.median(r.median_ms for r, _ in rows) for label, rows in by_label.items()}
    predicted = {label: rows[0][1] for label, rows in by_label.items()}
    measured_best = min(measured, key=measured.get)
    predicted_best = min(predicted, key=predicted.get)
    first = {label: rows[0][0] for label, rows in by_label.items()}
    return {"site": site_key, "measured_best": measured_best, "predicted_best": predicted_best,
            "right": (first[measured_best].plan, line_protocol(first[measured_best]))
            == (first[predicted_best].plan, line_protocol(first[predicted_best])),
            "regret": measured[predicted_best] / measured[measured_best]}


def summary(result: dict) -> dict:
    errors = [abs(p["error"]) for p in result["points"]]
    clear = [s for s in result["signs"] if not s["within_noise"]]
    return {
        "points": len(errors),
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        "sign_right": sum(s["right"] for s in clear) / len(clear) if clear else None,
        "sign_points": len(clear),
        "sign_right_incl_noise": (sum(s["right"] for s in result["signs"]) / len(result["signs"])
                                  if result["signs"] else None),
        "within_noise": len(result["signs"]) - len(clear),
        "best_right": (sum(b["right"] for b in result["bests"]) / len(result["bests"])) if result["bests"] else None,
        "median_regret": statistics.median(b["regret"] for b in result["bests"]) if result["bests"] else None,
        "max_regret": max(b["regret"] for b in result["bests"]) if result["bests"] else None,
        "sites": len(result["bests"]),
    }


IMPLEMENTATION_KEYS = ("method", "variant", "tile_config", "chunk_flags", "copy_streams", "copy_wait", "dynamic",
                       "edge_pieces", "side_waits", "link", "backend", "threads_per_rank", "peer_protocol", "captured",
                       "own_block_zero", "own_block_sum")
"""Fields of a results line's ``run`` that name how a plan was implemented (benchmarks add them
when they compare kernel variants of one plan); lines that differ in them are different things.
``peer_protocol`` is read through :func:`line_protocol` (a copy-engine line without it ran push),
``own_block_zero`` through :func:`line_own_zero`, ``own_block_sum`` through :func:`line_own_sum`."""


def implementation(record) -> tuple[str, ...]:
    """The ``IMPLEMENTATION_KEYS`` values of a line (as strings; ``peer_protocol`` by :func:`line_protocol`)."""
    run = record.run if isinstance(record.run, dict) else {}
    read = {"peer_protocol": line_protocol, "own_block_zero": line_own_zero, "own_block_sum": line_own_sum}
    return tuple(str(read[key](record) if key in read else run.get(key)) for key in IMPLEMENTATION_KEYS)


def run_to_run(groups: list[SiteGroup], *, same_commit: bool = False) -> dict:
    """The noise floor of ``groups`` (``hocket.bench.noise.run_to_run``), plans told apart by
    :func:`implementation`: variants of one plan are not counted as noise."""
    return noise_floor(groups, implementation=implementation, same_commit=same_commit)


def print_report(held: dict, calib: dict, label: str, *, all_points: bool = False) -> None:
    print(f"{'site':<44} {'plan':<28} {'measured_ms':>11} {'predicted_ms':>12} {'error':>7}")
    shown = held["points"] + (calib["points"] if all_points else [])
    for p in shown:
        print(f"{p['site'][:44]:<44} {p['plan']:<28} {p['measured_ms']:>11.4f} {p['predicted_ms']:>12.4f} "
              f"{p['error']:>+7.1%}")
    for name, result in (("held-out sites", held), ("calibration sites", calib)):
        s = summary(result)
        print(f"\n{name} ({label}): {s['points']} points on {s['sites']} sites | median |error| "
              f"{percent(s['median_abs_error'])}, max {percent(s['max_abs_error'])} | saving sign right "
              f"{percent(s['sign_right'])} of {s['sign_points']} (plus {s['within_noise']} within noise; "
              f"{percent(s['sign_right_incl_noise'])} counting them) | best plan right {percent(s['best_right'])}, "
              f"regret median {s['median_regret'] or 0:.3f} max {s['max_regret'] or 0:.3f}")
    for line in sorted(set(held["unpriced"] + calib["unpriced"])):
        print(f"note: not priced: {line[:150]}")
    print("targets: median <= 10%, max <= 25%, sign right >= 90%")


def lease_profile_views(sources: dict, groups: list[SiteGroup]) -> dict[str, CalibrationView]:
    """Group key -> a view of the profile calibrated on the lease of the file the group's lines came
    from (:func:`lease_profile_path`; ``sources``: id(line) -> its file, as :func:`read_current` fills
    it), for the groups whose lease left one that loads."""
    views: dict[str, CalibrationView] = {}
    loaded: dict[Path, CalibrationView | None] = {}
    for g in groups:
        path = sources.get(id(g.records[0]))
        profile_path = lease_profile_path(path) if path is not None else None
        if profile_path is None:
            continue
        if profile_path not in loaded:
            profile = load_profile(profile_path, expected=None)
            loaded[profile_path] = CalibrationView(profile) if profile is not None else None
        if loaded[profile_path] is not None:
            views[g.key] = loaded[profile_path]
    return views


def validate(paths, *, cluster: str | None = None, profiles=(), holdout: float = 1 / 3,
             no_calibration: bool = False, all_relays: bool = False, lease_profiles: bool = False,
             lease_only: bool = False) -> dict:
    """The cost model against the results lines of ``paths`` (files, as :func:`hocket.validate.lines.results_paths`
    lists them), one table per cluster: ``{"notes": [...], "machines": {machine: the sustained-ceiling note or
    None}, "clusters": {cluster: {"machine", "label", "held_out", "calibration", "run_to_run"}}}``; ``held_out``
    and ``calibration`` hold ``points``, ``signs``, ``bests``, ``unpriced`` and their ``summary``.

    ``cluster``: the preset or YAML every line was measured on (default: found per line); ``profiles``: paths of
    calibration profiles to merge in, each for the sites measured on its devices' models; ``holdout``: the
    fraction of sites held out, in [1/3, 1); ``no_calibration``: predict from the profiles and presets alone;
    ``all_relays``: also price host_staged lines of earlier relays; ``lease_profiles``/``lease_only``: the
    module doc."""
    if not 1 / 3 - 1e-9 <= holdout < 1:
        raise ValueError(f"holdout {holdout} must be in [1/3, 1): a third of the sites at least stay out")
    paths = [Path(p) for p in paths]
    sources: dict = {}
    records, read_notes = read_current(paths, all_relays=all_relays, sources=sources)
    forced = load_cluster(cluster) if cluster else None
    groups, notes = group_sites(records, forced)
    lease_views = lease_profile_views(sources, groups) if lease_profiles or lease_only else {}
    if lease_only:
        dropped = len(groups) - sum(g.key in lease_views for g in groups)
        groups = [g for g in groups if g.key in lease_views]
        notes.append(f"--lease-only: {dropped} site runs of leases that left no profile skipped")
    report: dict = {"notes": read_notes + notes, "machines": {}, "clusters": {}}
    loaded = [p for p in (load_profile(path, expected=None) for path in profiles) if p is not None]
    for machine in sorted({machine_of(g) for g in groups}):
        mine = [g for g in groups if machine_of(g) == machine]
        calibration, held_out = split_holdout(mine, holdout)
        base = profile_for(machine, loaded)
        if no_calibration:
            view, label = calibration_view(base), "profile only" if base else "no calibration"
            report["machines"][machine] = None
        else:  # one calibration per device model: every cluster of those devices shares it
            merged = calibration_profile(calibration, base)
            view = CalibrationView(merged)
            label = f"calibrated on {len(calibration)} other {machine} site runs' baselines" + \
                (" + profile" if base else "")
            report["machines"][machine] = sustained_note(merged, base)
        if lease_only:
            label = "each site run priced with its own lease's profile only"
        elif lease_views:
            leased = sum(g.key in lease_views for g in mine)
            label += f"; {leased} of {len(mine)} site runs priced with their own lease's profile only"
        for name in sorted({g.cluster.name for g in mine}):
            held = evaluate([g for g in held_out if g.cluster.name == name], view, lease_views)
            calib = evaluate([g for g in calibration if g.cluster.name == name], view, lease_views)
            here = [g for g in mine if g.cluster.name == name]
            noise = {"all_lines": run_to_run(here), "same_commit": run_to_run(here, same_commit=True)}
            report["clusters"][name] = {"machine": machine, "label": label,
                                        "held_out": {**held, "summary": summary(held)},
                                        "calibration": {**calib, "summary": summary(calib)}, "run_to_run": noise}
    return report


def print_validation(report: dict, *, all_points: bool = False) -> None:
    """Print :func:`validate`'s report: its notes, then per cluster the held-out points (``all_points``: the
    calibration sites' too), both sides' summaries and the run-to-run noise."""
    for note in report["notes"]:
        print(f"note: {note}")
    if not report["clusters"]:
        print("no priced results lines; run `hocket bench ... --out` first")
        return
    noted: set[str] = set()
    for name, table in report["clusters"].items():
        machine = table["machine"]
        if machine not in noted and report["machines"].get(machine):
            print(f"note: {machine}: {report['machines'][machine]}")
        noted.add(machine)
        print(f"\n## {name} ({machine})")
        print_report(table["held_out"], table["calibration"], table["label"], all_points=all_points)
        print_noise(table["run_to_run"]["all_lines"], "")
        print_noise(table["run_to_run"]["same_commit"], "at one git hash ")


def write_json(report: dict, path: Path | str) -> None:
    """Write :func:`validate`'s tables to ``path`` as JSON (cluster -> its table)."""
    Path(path).write_text(json.dumps(report["clusters"], indent=1, default=str) + "\n")
