"""Results lines grouped as the validation prices them: one group per run of a site on one machine (the lines
share their baselines), the cluster each ran on, and the frozen held-out split of the sites."""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import dataclass, field

from hocket.core.plan import Plan
from hocket.hardware import list_presets, load_preset, probe
from hocket.hardware.profile import CalibrationProfile
from hocket.validate.lines import captured_line, steady_line

PRICED_KINDS = ("ag_mm", "mm_rs", "mm_ar", "h2d_mm", "mm_d2h")
NCCL_THROUGH_HOST = {"h200-host-staged": "h200x2"}
"""Slow-link presets -> the machine they describe hocket's view of: NCCL baselines of those runs ran on that
machine with ``NCCL_P2P_DISABLE=1`` (NCCL's own transport through host memory, not hocket's relay), and
``hocket calibrate`` with the same variable measured their curves (``profile_host.json``). Priced as the
relay's bulk call instead, the six sequential lines of the slow-link bench came out 1-18% low; as NCCL on h200x2
with that profile, -1 to +10% (benchmarks/results/validation/2026-12-01_lease-by-lease.md)."""


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
    single-GPU offload benchmark on one GPU of a 2xH200 lease: an h200x1 line)."""
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


