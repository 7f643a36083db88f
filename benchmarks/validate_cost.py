"""Validate the cost model against measurements committed under benchmarks/results/.

Reads every results line (the schema of DESIGN.md section 4, ``hocket.bench.record``),
groups them by measured site, and holds out a third of the sites (every third site in a
fixed order, at least one): their measurements are never used to calibrate. The
calibration profile the model predicts with is built from the *other* sites' baselines
only (``compute_alone_ms`` -> GEMM points, ``comm_alone_ms`` -> transfer curve points),
optionally merged with a machine profile (``--profile``, measured by ``hocket calibrate``
on separate microbenchmarks). No plan's overlapped time is ever used to calibrate, so
every strategy's prediction is a held-out prediction of its mechanism.

Steady-state lines (``run.reps > 1``) are priced with GEMMs under the sustained ceiling (the
profile's ``gemm_sustained``, ``hocket.cost.compute``). A profile made before that field existed gets
a derived one: among the *calibration* sites' steady runs with a large GEMM (the profile prices it at
>= ``SUSTAINED_MIN_MS`` in a burst, like the GEMMs ``hocket calibrate`` runs back to back) that ran
slower than that burst price (held by the power cap), the median run's rate; held-out sites never
feed it. The header says which. Steady compute-alone baselines are GEMM points as measured (at the
ceiling where it holds them, so a steady prediction at a calibration shape reproduces them);
steady comm-alone baselines (timed back to back) are ``collectives_steady`` points, which steady
predictions read (``CalibrationView.for_steady_state``), from-idle ones ``collectives`` points.

Printed: per-point error (held-out sites), median and max relative error, and decision
accuracy: how often the predicted sign of the saving over sequential matches the
measured one (points whose measured saving is within the measurement noise are counted
apart), and how often the predicted best plan of a site is the measured best (with the
regret of following the prediction). Targets (issue 3): median <= 10%, max <= 25%,
sign right >= 90%.

A ``chunked`` plan over ``copy_engine`` is priced with the peer protocol its line ran
(``run.peer_protocol``; push for lines written before that field existed), not with today's
default, and is labelled `` ~pull``/`` ~put`` where it ran no push.

  python -m benchmarks.validate_cost                            # every *.jsonl under results/
  python -m benchmarks.validate_cost results/h200/bench_single_gpu.jsonl --cluster h200x1 --json out.json
  python -m benchmarks.validate_cost --no-calibration           # datasheet + mechanisms only
  python -m benchmarks.validate_cost --lease-only               # each line with its own lease's profile

``--lease-profiles`` prices the lines of each results file with the profile ``hocket calibrate`` made on
the same lease (``profile.json``/``profile_host.json`` beside it, :func:`lease_profile_path`) where one
exists, that profile alone (host issue costs and curves differ up to 2x between leases of one machine
kind); ``--lease-only`` also skips the lines of leases that left none. The held-out split is the same.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks.line_modes import (  # noqa: F401  (re-exported: the other scripts and tests read them here)
    CURRENT_RELAY,
    CURRENT_RELAY_RUNS,
    DEVICE_SIGNAL_RUNS,
    EAGER_GRAPHS_BENCH,
    FIRST_CURRENT_RELAY_RUN,
    FIRST_DEVICE_SIGNAL_RUN,
    PEER_PROTOCOL_KINDS,
    PROTOCOL_BEFORE_RUN14,
    captured_line,
    eager_graph_line,
    hocket_bench_graph_command,
    is_relay_line,
    line_calls,
    line_executor_revision,
    line_label,
    line_own_sum,
    line_own_zero,
    line_protocol,
    line_signal,
    plan_as_ran,
    steady_line,
    superseded_offload_variant,
    with_plan_protocol,
)
from hocket.bench.noise import percent, print_noise
from hocket.bench.noise import run_to_run as noise_floor
from hocket.bench.record import read_records
from hocket.core.plan import Plan
from hocket.cost.calibration import CalibrationView, calibration_view
from hocket.cost.compute import gemm_ms
from hocket.hardware import list_presets, load_cluster, load_preset, probe
from hocket.hardware.profile import CalibrationProfile, CurvePoint, GemmPoint, SustainedGemm, load_profile
from hocket.strategies import predict

RESULTS = Path(__file__).resolve().parent / "results"
PRICED_KINDS = ("ag_mm", "mm_rs", "mm_ar", "h2d_mm", "mm_d2h")
CURVE_OF_KIND = {"ag_mm": "all_gather", "mm_rs": "reduce_scatter", "mm_ar": "all_reduce",
                 "h2d_mm": "host_link", "mm_d2h": "host_link"}


NOISE_FLOOR = 0.02
"""A measured saving smaller than this fraction of sequential (or than the p10-p90 spread) is noise."""
NCCL_THROUGH_HOST = {"h200-host-staged": "h200x2"}
"""Slow-link presets -> the machine they describe hocket's view of: NCCL baselines of those runs ran on that
machine with ``NCCL_P2P_DISABLE=1`` (NCCL's own transport through host memory, not hocket's relay), and
``hocket calibrate`` with the same variable measured their curves (``profile_host.json``). Priced as the
relay's bulk call instead, the six issue-6 sequential lines of run38 came out 1-18% low; as NCCL on h200x2
with that profile, -1 to +10%."""


@functools.lru_cache(maxsize=8)
def _preset(name: str):
    return load_preset(name)


def through_host_profile(profile: object) -> bool:
    """Whether ``profile`` (a CalibrationProfile, a view of one, or None) was calibrated with
    ``NCCL_P2P_DISABLE=1`` (``run_multigpu.sh``'s ``calibrate_host``), as its fingerprint's env records."""
    profile = getattr(profile, "profile", profile)
    data = getattr(profile, "fingerprint_data", None)
    env = data.get("env") if isinstance(data, dict) else None
    return isinstance(env, dict) and str(env.get("NCCL_P2P_DISABLE", "")) == "1"


@dataclass
class SiteGroup:
    """All plans of one site measured in one run (same baselines) on one machine."""

    key: str
    site: object
    cluster: object
    records: list = field(default_factory=list)

    @property
    def sequential_ms(self) -> float:
        return self.records[0].baselines.sequential_ms

    @property
    def steady(self) -> bool:
        """Whether the run timed calls back to back (``run.reps > 1``, the steady state): its lines
        are priced with ``predict(..., steady_state=True)``; one call per barrier otherwise."""
        return steady_line(self.records[0])

    @property
    def captured(self) -> bool:
        """Whether the run replayed its calls from CUDA graphs (``captured_line``)."""
        return captured_line(self.records[0])

    def sequential_plan(self) -> Plan:
        return self.priced(self.sequential_ran())

    def sequential_ran(self) -> Plan:
        """The run's sequential plan as it ran (before :meth:`pricing`)."""
        for r in self.records:
            if r.plan.strategy == "sequential":
                return r.plan
        return Plan(transport=self.records[0].plan.transport)

    def pricing(self, plan: Plan, profile: object = None) -> tuple[Plan, object]:
        """(plan, cluster) the cost model prices a line of ``plan`` with: NCCL run with
        ``NCCL_P2P_DISABLE=1`` on a cluster whose GPUs hocket may only join through host memory is
        NCCL on the machine's own preset (``NCCL_THROUGH_HOST``) when ``profile`` (a profile or a view
        of one) was calibrated under the same variable, so its collective curves are NCCL's through host
        memory; elsewhere :meth:`priced` on this cluster (the relay's bulk call)."""
        if plan.transport == "collective" and self.site.world > 1 and self.cluster.name in NCCL_THROUGH_HOST \
                and through_host_profile(profile):
            if "collective" not in self.cluster.group_transports(self.site.group_ranks):
                return plan, _preset(NCCL_THROUGH_HOST[self.cluster.name])
        return self.priced(plan), self.cluster

    def measures_collective(self) -> bool:
        """Whether the run's comm-alone time is the site's collective on the cluster's own
        links (not a copy-engine push, nor NCCL forced through host memory)."""
        transport = getattr(self.records[0].baselines, "comm_alone_transport", None) or "collective"
        return transport == "collective" and self.priced(Plan()).transport == "collective"

    def priced(self, plan: Plan) -> Plan:
        """The plan as the cost model prices it on this cluster: NCCL run with
        ``NCCL_P2P_DISABLE=1`` on a cluster whose GPUs only meet through host memory stages
        through pinned host buffers, which is the host_staged path."""
        if plan.transport == "collective" and self.site.world > 1:
            offered = self.cluster.group_transports(self.site.group_ranks)
            if "collective" not in offered and "host_staged" in offered:
                return plan.with_(transport="host_staged")
        return plan


def devices_used(record) -> tuple[dict, int]:
    """(device counts, ranks) a line ran on: its ``hardware.devices`` and ``world_size``, narrowed to
    ``site.world`` devices where a site of fewer ranks ran on one node of one device model (the
    single-GPU offload benchmark on one GPU of a 2xH200 lease, h200 runs 5-6: an h200x1 line)."""
    hardware = record.hardware if isinstance(record.hardware, dict) else {}
    devices = dict(hardware.get("devices") or {})
    world = int(hardware.get("world_size") or record.site.world)
    ranks = record.site.world
    if len(devices) == 1 and (hardware.get("nodes") or 1) == 1 and ranks < next(iter(devices.values())):
        return {next(iter(devices)): ranks}, ranks
    return devices, world


def find_cluster(record, forced, cache: dict):
    """The ClusterSpec a line was measured on: ``--cluster``, else the preset (or this
    machine's probe, for CPU ranks) with the same device counts (those the site used:
    ``devices_used``) and node count."""
    if forced is not None:
        return forced
    named = record.run.get("cluster") if isinstance(record.run, dict) else None
    if isinstance(named, str) and named in list_presets():  # the preset the benchmark ran with
        if named not in cache:
            cache[named] = load_preset(named)
        return cache[named]
    hardware = record.hardware if isinstance(record.hardware, dict) else {}
    devices, world = devices_used(record)
    key = json.dumps([devices, hardware.get("nodes")], sort_keys=True)
    if key not in cache:
        candidates = [probe(cpu_ranks=world)] + [load_preset(name) for name in list_presets()]
        cache[key] = next((c for c in candidates if c.device_counts() == devices
                           and c.num_nodes == (hardware.get("nodes") or 1)), None)
    return cache[key]


def measures_current_executor(record, path: Path | str) -> bool:
    """False for multi-rank host_staged lines of another relay or executor than today's (the line's ``executor``
    revision; for lines without one, ``CURRENT_RELAY`` and ``CURRENT_RELAY_RUNS``) and for one-rank tile_fused lines of a schedule the
    offload operators no longer run (``line_modes.superseded_offload_variant``); ``path`` is the results file
    it came from."""
    if superseded_offload_variant(record, path):
        return False
    if not (record.plan.transport == "host_staged" and record.site.world > 1):
        return True
    method = str(record.run.get("method", "")) if isinstance(record.run, dict) else ""
    if "@" in method and not method.split(",signal=")[0].endswith(CURRENT_RELAY):
        return False
    if line_executor_revision(record) is not None:
        return True  # every executor revision runs today's relay
    where = Path(path).resolve().as_posix()
    return any(run in where for run in CURRENT_RELAY_RUNS)


def _fill_signal(record, path: Path | str) -> None:
    """Record which relay signalling an older multi-rank host_staged line ran (``DEVICE_SIGNAL_RUNS``)."""
    run = record.run if isinstance(record.run, dict) else None
    if run is None or not is_relay_line(record) or run.get("host_stage_signal"):
        return
    method = str(run.get("method", ""))
    if ",signal=" in method:
        run["host_stage_signal"] = method.rsplit(",signal=", 1)[1].split(",")[0].strip()
        return
    if line_executor_revision(record) is not None:
        run["host_stage_signal"] = "device"
        return
    where = Path(path).resolve().as_posix()
    run["host_stage_signal"] = "device" if any(r in where for r in DEVICE_SIGNAL_RUNS) else "host"


def read_current(paths, *, all_relays: bool = False, strict: bool = False,
                 sources: dict | None = None) -> tuple[list, list[str]]:
    """Results lines of ``paths`` that measured today's executors (all of them with
    ``all_relays``), and notes on what was skipped. A file that is not results lines is
    noted and skipped, or raises with ``strict``. ``sources``: filled with id(line) -> its file."""
    records, notes, superseded = [], [], 0
    for path in paths:
        try:
            lines = read_records(path)
        except ValueError as exc:  # another benchmark's file (e.g. simulate or compile timings)
            if strict:
                raise
            notes.append(f"{path} skipped: {str(exc)[:160]}")
            continue
        if Path(path).name.startswith(EAGER_GRAPHS_BENCH):
            unrecorded = [r for r in lines if not (isinstance(r.run, dict) and r.run.get("executor_fields"))]
            if unrecorded:
                notes.append(f"{path}: {len(unrecorded)} bench_eager_graphs.py lines without the executor fields "
                             f"skipped (runs 84-88)")
                lines = [r for r in lines if r not in unrecorded]
        graphed = [r for r in lines if eager_graph_line(r)]
        if graphed:
            notes.append(f"{path}: {len(graphed)} lines of calls under HOCKET_EAGER_GRAPHS skipped (priced by "
                         f"hocket.plan.eager_graphs)")
            lines = [r for r in lines if not eager_graph_line(r)]
        kept = lines if all_relays else [r for r in lines if measures_current_executor(r, path)]
        for r in kept:
            _fill_signal(r, path)
            if sources is not None:
                sources[id(r)] = path
        superseded += len(lines) - len(kept)
        records.extend(kept)
    if superseded:
        notes.append(f"{superseded} host_staged lines of earlier relays/executors skipped (multi-rank relays, and 1xH200 "
                     f"tile_fused lines of the 'previous' schedule; keep them with --all-relays)")
    return records, notes


def group_sites(records, forced) -> tuple[list[SiteGroup], list[str]]:
    groups: dict[str, SiteGroup] = {}
    notes: list[str] = []
    cache: dict = {}
    for record in records:
        if record.site.kind not in PRICED_KINDS:
            notes.append(f"{record.site.kind} lines skipped (no cost model for that kind yet)")
            continue
        cluster = find_cluster(record, forced, cache)
        if cluster is None:
            notes.append(f"no preset matches the hardware of a {record.site.kind} line "
                         f"({record.hardware.get('devices')}); pass --cluster")
            continue
        hw = record.hardware.get("hash", "") if isinstance(record.hardware, dict) else ""
        # one group per run of a site: the plans of one run share their baselines
        key = f"{record.site.key}@{hw}#{record.baselines.sequential_ms:.6g}{'@graph' if captured_line(record) else ''}"
        groups.setdefault(key, SiteGroup(key=key, site=record.site, cluster=cluster)).records.append(record)
    return list(groups.values()), sorted(set(notes))


HELD_OUT_SITES = (
    "mm_d2h:8192x8192x7168:bfloat16:w1:forward:454f92dd685e",
    "mm_d2h:8192x3584x8192:bfloat16:w1:forward:55808633c354",
    "ag_mm:8192x4096x14336:bfloat16:w2:forward:01266eff6b4a",
    "mm_rs:8192x7168x4096:bfloat16:w2:forward:9bd060bebad8",
    "mm_ar:8192x2048x4096:bfloat16:w2:forward:a2f7af969c5f",
)
"""The sites held out when the split was first drawn (commit 6a85ac4): frozen, so adding
results files never moves a site between the held-out and the calibration sets."""
CALIBRATION_SITES = (
    "ag_mm:8192x8192x7168:bfloat16:w2:forward:ac3caf2b20ea",
    "h2d_mm:8192x8192x7168:bfloat16:w1:forward:864c0d0c32ac",
    "h2d_mm:8192x3584x8192:bfloat16:w1:forward:31bd8e2387c1",
    "mm_d2h:8192x8192x1280:bfloat16:w1:forward:2f139fc0238c",
    "h2d_mm:8192x8192x1280:bfloat16:w1:forward:0ed5e6a8df4d",
    "mm_d2h:4096x12288x6144:bfloat16:w1:forward:14dc1e9dd533",
    "h2d_mm:4096x12288x6144:bfloat16:w1:forward:f88a41022c68",
    "ag_mm:8192x4096x3072:bfloat16:w2:forward:72acf1ed60d1",
)
"""The sites that calibrated in that first split (frozen alike)."""


def held_out_site(site_key: str, step: int) -> bool:
    """Frozen sites keep their side; any other site is held out when its key's SHA-1 is
    divisible by ``step`` (a rule that does not depend on which other sites exist)."""
    if site_key in HELD_OUT_SITES:
        return True
    if site_key in CALIBRATION_SITES:
        return False
    return int(hashlib.sha1(site_key.encode()).hexdigest(), 16) % step == 0


def split_holdout(groups: list[SiteGroup], fraction: float) -> tuple[list[SiteGroup], list[SiteGroup]]:
    """(calibration, held out), by site: all runs of a held-out site stay out."""
    step = max(1, round(1 / fraction))
    held = [g for g in groups if held_out_site(g.key.split("@")[0], step)]
    return [g for g in groups if g not in held], held


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
        fingerprint=base.fingerprint if base else "validate_cost", world_size=base.world_size if base else 1,
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
    its lines, on both sides: session 18's tables took the predicted plan at its first line and the
    best at its fastest, so one plan timed at 0.343 and 0.218 ms read as a 1.57 regret against itself."""
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


def machine_of(group: SiteGroup) -> str:
    """The device models of the cluster a site ran on: one table per machine kind."""
    return "+".join(sorted(group.cluster.device_counts()))


def profile_for(machine: str, profiles: list[CalibrationProfile]) -> CalibrationProfile | None:
    """The profile measured on devices of this machine's models (a profile without
    fingerprint devices applies everywhere)."""
    for profile in profiles:
        devices = profile.fingerprint_data.get("devices") if isinstance(profile.fingerprint_data, dict) else None
        if not devices or "+".join(sorted(devices)) == machine:
            return profile
    return None


LEASE_PROFILES = (("host_staged", "profile_host.json"), ("bench_captured", "profile_host.json"), ("", "profile.json"))
"""Which profile beside a results file was calibrated in the same lease for it: a file whose name holds
``host_staged`` (the slow-link phase of ``benchmarks/run_multigpu.sh``, NCCL with ``NCCL_P2P_DISABLE=1``)
or ``bench_captured`` (benchmarks/bench_captured.py, the same link mode)
reads ``profile_host.json`` (``PHASES=calibrate_host``); any other reads ``profile.json``
(``PHASES=calibrate``). The first entry whose name part the file's name holds decides."""


def lease_profile_path(results: Path | str) -> Path | None:
    """The calibration profile measured on the same lease as the results file ``results`` (its folder,
    ``LEASE_PROFILES``), or None when that lease left none: what ``hocket plan`` would have priced with
    had it run there after ``hocket calibrate``."""
    results = Path(results)
    for part, name in LEASE_PROFILES:
        if part in results.name:
            candidate = results.parent / name
            return candidate if candidate.is_file() else None
    return None


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="results JSON-lines files (default: every *.jsonl under results/)")
    parser.add_argument("--cluster", default=None, help="cluster preset or YAML every line was measured on")
    parser.add_argument("--profile", action="append", default=[],
                        help="a calibration profile to merge in (repeatable: each applies to the sites measured "
                             "on its devices' models)")
    parser.add_argument("--holdout", type=float, default=1 / 3, help="fraction of sites held out (>= 1/3)")
    parser.add_argument("--no-calibration", action="store_true", help="predict from presets and mechanisms only")
    parser.add_argument("--all-points", action="store_true", help="print the calibration sites' points too")
    parser.add_argument("--all-relays", action="store_true",
                        help=f"also price host_staged lines of earlier relays (not {CURRENT_RELAY})")
    parser.add_argument("--json", default=None, help="write points, decisions and summaries to this file")
    parser.add_argument("--lease-profiles", action="store_true",
                        help="price each results file's lines with the profile hocket calibrate made on the same "
                             "lease (profile.json / profile_host.json beside it) where it left one, that profile "
                             "alone; other lines as without the flag")
    parser.add_argument("--lease-only", action="store_true",
                        help="--lease-profiles, and skip the lines of leases that left no profile")
    args = parser.parse_args(argv)
    if not 1 / 3 - 1e-9 <= args.holdout < 1:
        parser.error(f"--holdout {args.holdout} must be in [1/3, 1): a third of the sites at least stay out")
    paths = [Path(p) for p in args.paths] or sorted(RESULTS.rglob("*.jsonl"))
    sources: dict = {}
    records, read_notes = read_current(paths, all_relays=args.all_relays, sources=sources)
    forced = load_cluster(args.cluster) if args.cluster else None
    groups, notes = group_sites(records, forced)
    lease_views = lease_profile_views(sources, groups) if args.lease_profiles or args.lease_only else {}
    if args.lease_only:
        dropped = len(groups) - sum(g.key in lease_views for g in groups)
        groups = [g for g in groups if g.key in lease_views]
        notes.append(f"--lease-only: {dropped} site runs of leases that left no profile skipped")
    for note in read_notes + notes:
        print(f"note: {note}")
    if not groups:
        print(f"no priced results lines in {', '.join(map(str, paths)) or RESULTS}; run `hocket bench ... --out`")
        return 0
    profiles = [p for p in (load_profile(path, expected=None) for path in args.profile) if p is not None]
    report = {}
    for machine in sorted({machine_of(g) for g in groups}):
        mine = [g for g in groups if machine_of(g) == machine]
        calibration, held_out = split_holdout(mine, args.holdout)
        base = profile_for(machine, profiles)
        if args.no_calibration:
            view, label = calibration_view(base), "profile only" if base else "no calibration"
        else:  # one calibration per device model: every cluster of those devices shares it
            merged = calibration_profile(calibration, base)
            view = CalibrationView(merged)
            label = f"calibrated on {len(calibration)} other {machine} site runs' baselines" + \
                (" + profile" if base else "")
            print(f"note: {machine}: {sustained_note(merged, base)}")
        if args.lease_only:
            label = "each site run priced with its own lease's profile only"
        elif lease_views:
            leased = sum(g.key in lease_views for g in mine)
            label += f"; {leased} of {len(mine)} site runs priced with their own lease's profile only"
        for cluster in sorted({g.cluster.name for g in mine}):
            held = evaluate([g for g in held_out if g.cluster.name == cluster], view, lease_views)
            calib = evaluate([g for g in calibration if g.cluster.name == cluster], view, lease_views)
            print(f"\n## {cluster} ({machine})")
            print_report(held, calib, label, all_points=args.all_points)
            here = [g for g in mine if g.cluster.name == cluster]
            noise = {"all_lines": run_to_run(here), "same_commit": run_to_run(here, same_commit=True)}
            print_noise(noise["all_lines"], "")
            print_noise(noise["same_commit"], "at one git hash ")
            report[cluster] = {"label": label, "held_out": {**held, "summary": summary(held)},
                               "calibration": {**calib, "summary": summary(calib)}, "run_to_run": noise}
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
