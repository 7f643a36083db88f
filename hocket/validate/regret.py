"""The planner's regret against the best measured plan: ``hocket regret``.

For each measured site: the measured time of the plan chosen by prediction alone (autotune off) over the best
measured plan, the same with autotune on (top-k predicted plus sequential, decided by measurement), and both
against measured sequential (``hocket.plan.regret``). Targets: prediction-alone regret <= 1.05; never slower than
sequential beyond noise in either mode. Where the planner stands:
benchmarks/results/validation/2026-12-01_cost-model.md.

The cluster each line was measured on is found by matching its hardware fingerprint (devices, topology, nodes,
network) against this machine's probe and the presets; ``cluster`` names it instead.

A ``chunked`` plan over ``copy_engine`` runs one of several peer protocols (``hocket.core.peer_protocol``); a site
is scored under the protocol its copy-engine lines ran (:func:`hocket.validate.lines.line_protocol`): the
candidates are priced with it and only its lines are looked up. A site with lines of several protocols is scored
with the protocol of the line read last (the newest, by the order of the files given), with a note; likewise for
how the relay lines called the relay (:func:`hocket.validate.lines.line_calls`).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from pathlib import Path

from hocket.hardware import fingerprint, list_presets, load_cluster, load_preset, probe
from hocket.hardware.profile import load_profile
from hocket.plan.labels import plan_label
from hocket.plan.regret import machine_key, planner_regret
from hocket.plan.search import predict_cost_fn
from hocket.plan.uncertainty import uncertainty_from_profile
from hocket.validate.lines import (
    RESULTS,
    captured_line,
    lease_profile_path,
    line_calls,
    line_protocol,
    read_current,
    steady_line,
    with_plan_protocol,
)
from hocket.validate.sites import held_out_site

MATCH_KEYS = ("devices", "nodes", "topology", "network_transports")
NOISE_FLOOR = 0.02
"""A choice slower than sequential by less than this fraction (or sequential's p10-p90 spread) is noise."""


def _shape(fp: dict) -> str:
    return json.dumps({k: fp.get(k) for k in MATCH_KEYS}, sort_keys=True, default=str)


def _islands(fp: dict) -> list:
    return [island for node in (fp.get("topology") or []) for island in (node.get("islands") or [])]


def same_machine(recorded: dict, described: dict) -> bool:
    """Whether a results line's fingerprint ``recorded`` is the machine ``described`` (a preset's
    or the probe's fingerprint): equal in ``MATCH_KEYS``, except that an island of
    ``described`` may offer transports the line's hocket did not know yet (e.g. ``peer_read``,
    added to the presets after the first 2xH200 results): the described ones must include the recorded."""
    if _shape(recorded) == _shape(described):
        return True
    if any(recorded.get(k) != described.get(k) for k in MATCH_KEYS if k != "topology"):
        return False
    mine, theirs = _islands(recorded), _islands(described)
    if len(mine) != len(theirs) or len(recorded.get("topology") or []) != len(described.get("topology") or []):
        return False
    for a, b in zip(mine, theirs):
        if not set(a.get("transports") or ()) <= set(b.get("transports") or ()):
            return False
        if {k: v for k, v in a.items() if k != "transports"} != {k: v for k, v in b.items() if k != "transports"}:
            return False
    strip = lambda fp: [{k: v for k, v in node.items() if k != "islands"} for node in fp.get("topology") or []]  # noqa: E731
    return strip(recorded) == strip(described)


def through_host(cluster, cost):
    """``cost`` pricing a ``collective`` plan as ``host_staged`` where the group's GPUs meet only
    through host memory (NCCL run with ``NCCL_P2P_DISABLE=1`` stages through pinned host
    buffers: the host_staged path), as the validation does (:meth:`hocket.validate.sites.SiteGroup.priced`)."""

    def priced(site, plan):
        if plan.transport == "collective" and site.world > 1:
            offered = cluster.group_transports(site.group_ranks)
            if "collective" not in offered and "host_staged" in offered:
                plan = plan.with_(transport="host_staged")
        return cost(site, plan)

    return priced


def site_machine(record) -> tuple[str, str]:
    """(site key, machine key): the group a line is scored in (``hocket.plan.regret.group_records``'s key)."""
    return record.site.key, machine_key(record)


def one_mode_per_site(records, mode_of, what: str) -> tuple[list, dict[tuple[str, str], str], list[str]]:
    """The lines to score, the mode (``mode_of(line)``: None where the line has none) of each site
    (``site_machine`` key) that has lines with one, and notes. Where a site's lines ran several modes, the
    one of the line read last is kept and the lines of the others are left out (noted), so that the plan
    chosen on prices of that mode is looked up among lines of that mode."""
    seen: dict[tuple[str, str], list[str]] = {}
    for r in records:
        mode = mode_of(r)
        if mode is not None:
            seen.setdefault(site_machine(r), []).append(mode)
    chosen = {key: ran[-1] for key, ran in seen.items()}
    kept = [r for r in records if mode_of(r) in (None, chosen.get(site_machine(r)))]
    notes = []
    for key, ran in seen.items():
        if len(set(ran)) > 1:
            left = sum(m != chosen[key] for m in ran)
            notes.append(f"{key[0]} on hardware {key[1]}: {what} lines of {sorted(set(ran))}; "
                         f"scored with {chosen[key]} (the newest line's), {left} lines of the others left out")
    return kept, chosen, notes


def one_protocol_per_site(records) -> tuple[list, dict[tuple[str, str], str], list[str]]:
    """:func:`one_mode_per_site` for the copy-engine peer protocol (:func:`hocket.validate.lines.line_protocol`)."""
    return one_mode_per_site(records, line_protocol, "copy-engine")


def one_relay_calls_per_site(records) -> tuple[list, dict[tuple[str, str], str], list[str]]:
    """:func:`one_mode_per_site` for how the relay lines' pipelines called the relay
    (:func:`hocket.validate.lines.line_calls`: ``piece`` for lines that do not record it, ``one`` since the field exists), so that a site is
    scored with lines of the executor its newest line ran."""
    return one_mode_per_site(records, line_calls, "host-staged (relay calls)")


def with_protocol(protocol: str | None, cost):
    """``cost`` pricing every copy-engine ``chunked`` plan with ``protocol`` as its ``Plan.protocol``;
    ``cost`` itself for None."""
    if protocol is None:
        return cost
    def priced(site, plan):
        return cost(site, with_plan_protocol(plan, protocol))

    return priced


class ClusterFinder:
    """Hardware fingerprint of a results line -> a CostFn on the matching ClusterSpec (pricing copy-engine
    plans with the peer protocol of the line's site: ``protocols``, keyed by ``site_machine``)."""

    def __init__(self, forced: str | None, profile: object = None, protocols: dict | None = None,
                 lease_profiles: dict | None = None) -> None:
        self.forced = load_cluster(forced) if forced else None
        self.profile = profile
        self.lease_profiles = dict(lease_profiles or {})
        """``site_machine`` key -> the profile calibrated on the lease of that site's newest line"""
        self.protocols = dict(protocols or {})
        self._by_shape: dict[str, object] = {}
        self._costs: dict[tuple, object] = {}

    def _candidates(self, world: int):
        yield probe(cpu_ranks=world)
        for name in list_presets():
            yield load_preset(name)

    def cluster_for(self, record) -> object | None:
        if self.forced is not None:
            return self.forced
        hardware = record.hardware if isinstance(record.hardware, dict) else {}
        shape = _shape(hardware)
        if shape not in self._by_shape:
            world = int(hardware.get("world_size") or record.site.world)
            self._by_shape[shape] = next((c for c in self._candidates(world) if same_machine(hardware, fingerprint(c))),
                                         None)
        return self._by_shape[shape]

    def profile_for(self, record) -> object:
        """The profile of the lease of the site's newest line (``lease_profiles``) where it kept one,
        else ``--profile`` for lines measured on the profile's device models, else None (an H200
        profile says nothing about CPU ranks)."""
        lease = self.lease_profiles.get(site_machine(record))
        if lease is not None:
            return lease
        if self.profile is None:
            return None
        hardware = record.hardware if isinstance(record.hardware, dict) else {}
        mine = set((getattr(self.profile, "fingerprint_data", None) or {}).get("devices") or {})
        return self.profile if not mine or mine == set(hardware.get("devices") or {}) else None

    def cost_for(self, record):
        """The cost function of the line's machine, in the line's timing mode (steady state when
        its run timed calls back to back: :func:`hocket.validate.lines.steady_line`)."""
        cluster = self.cluster_for(record)
        if cluster is None:
            return None
        profile = self.profile_for(record)
        steady, captured = steady_line(record), captured_line(record)
        protocol = self.protocols.get(site_machine(record))
        key = (id(cluster), id(profile), steady, captured, protocol)
        if key not in self._costs:
            cost = through_host(cluster, predict_cost_fn(cluster, profile, steady_state=steady, captured=captured))
            self._costs[key] = with_protocol(protocol, cost)
        return self._costs[key]

    def uncertainty_for(self, record):
        return uncertainty_from_profile(self.profile_for(record), world=record.site.world)


def newest_lease_profiles(paths) -> dict[tuple[str, str], object]:
    """``site_machine`` key -> the calibration profile of the lease (:func:`hocket.validate.lines.lease_profile_path`)
    of the site's last line in ``paths`` (read in order), for the sites whose newest line's lease kept one."""
    loaded: dict[Path, object] = {}
    newest: dict[tuple[str, str], object] = {}
    for path in paths:
        lease = lease_profile_path(path)
        if lease is not None and lease not in loaded:
            loaded[lease] = load_profile(lease, expected=None)
        for r in read_current([path])[0]:
            key = site_machine(r)
            newest[key] = loaded.get(lease) if lease is not None else None
    return {key: profile for key, profile in newest.items() if profile is not None}


def protocol_label(plan, protocol: str | None) -> str:
    """``plan_label(plan)``, plus `` ~pull``/`` ~put`` for a copy-engine chunked plan of a site scored
    with another protocol than push (unmarked copy-engine plans ran push: ``hocket.validate.lines.PROTOCOL_BEFORE_RUN14``)."""
    label = plan_label(plan)
    if plan.strategy == "chunked" and plan.transport == "copy_engine" and protocol not in (None, "push"):
        return f"{label} ~{protocol}"
    return label


def held_out_keys(records) -> set[str]:
    """Site keys the validation holds out (its frozen split, :func:`hocket.validate.sites.held_out_site`)."""
    return {r.site.key for r in records if held_out_site(r.site.key, 3)}


def lost_to_sequential(vs_sequential: float, noise: float) -> bool:
    """Whether a choice that ran ``vs_sequential`` times sequential's time lost to doing nothing
    beyond the noise (sequential's relative p10-p90 spread, at least ``NOISE_FLOOR``)."""
    return vs_sequential > 1.0 + max(noise, NOISE_FLOOR)


def summarize(rows) -> dict:
    """The summary line's figures over regret rows (hocket.plan.regret.RegretRow; at least one):
    median and max regret, and choices slower than sequential beyond noise, per mode."""
    if not rows:
        raise ValueError("summarize needs at least one regret row; check that the results lines were priced")
    figures: dict = {"sites": len(rows)}
    for mode in ("predicted", "tuned"):
        regrets = [getattr(r, f"{mode}_regret") for r in rows]
        figures[f"{mode}_median"] = statistics.median(regrets)
        figures[f"{mode}_max"] = max(regrets)
        figures[f"{mode}_losses"] = sum(lost_to_sequential(getattr(r, f"{mode}_vs_sequential"), r.noise)
                                        for r in rows)
    return figures


def score(records, lease_paths, *, cluster: str | None = None, profile: object = None, top_k: int = 4,
          margin: float = 0.03, uncertainty: bool = True, lease_profiles: bool = False,
          run_of=None) -> tuple[list, list[str]]:
    """(regret row, the copy-engine protocol its site was scored with) for ``records`` (one copy-engine
    protocol and one relay calling mode per site: the newest line's), and notes. ``lease_paths``: the
    files whose leases' profiles price the lines (with ``lease_profiles``)."""
    records, protocols, protocol_notes = one_protocol_per_site(records)
    records, _, calls_notes = one_relay_calls_per_site(records)
    leases = newest_lease_profiles(lease_paths) if lease_profiles else {}
    finder = ClusterFinder(cluster, profile, protocols, leases)
    rows, notes = planner_regret(records, finder.cost_for, top_k=top_k, margin=margin,
                                 uncertainty_for=finder.uncertainty_for if uncertainty else None,
                                 run_of=run_of)
    return [(r, protocols.get((r.site.key, r.hardware_hash))) for r in rows], protocol_notes + calls_notes + notes


def run_labels(records, path) -> Callable[[object], str]:
    """A line of ``path`` -> its run's label: the file (below results/), and where the file holds several
    measurements of a site's sequential baseline (several invocations appended), ``#i`` in their order."""
    path = Path(path)
    try:
        label = str(path.resolve().relative_to(RESULTS.resolve()))
    except ValueError:
        label = str(path)
    seen: dict[str, list[float]] = {}
    for r in records:
        runs = seen.setdefault(r.site.key, [])
        if r.baselines.sequential_ms not in runs:
            runs.append(r.baselines.sequential_ms)

    def run_of(record) -> str:
        runs = seen.get(record.site.key, [])
        if len(runs) < 2 or record.baselines.sequential_ms not in runs:
            return label
        return f"{label}#{runs.index(record.baselines.sequential_ms) + 1}"

    return run_of


HOLDOUTS = ("all", "held-out", "calibration")


def regret(paths, *, cluster: str | None = None, profile: str | Path | None = None, top_k: int = 4,
           margin: float = 0.03, uncertainty: bool = True, holdout: str = "all", all_relays: bool = False,
           lease_profiles: bool = False, captured: bool = False, per_run: bool = False,
           strict: bool = False) -> dict:
    """The planner's regret over the results lines of ``paths`` (files): ``{"scored": [(RegretRow, the peer
    protocol its site was scored with)], "summary": summarize(rows) or None, "notes": [...],
    "lines": the results lines read, "unpriced":
    [(site key, why)], "options": {...}}``.

    ``cluster``: the preset or YAML every line was measured on (default: matched per line); ``profile``: the
    calibration profile to predict with (for lines of its device models); ``top_k``: plans autotuning times
    besides sequential; ``margin``: the saving a plan needs over sequential; ``uncertainty``: add the per-class
    model-error allowance (``hocket.plan.uncertainty``); ``holdout``: score every site, or only the validation's
    held-out third (or the rest); ``all_relays``: also score host_staged lines of earlier relays;
    ``lease_profiles``: price each site with the profile of its newest line's lease where it kept one;
    ``captured``: score the lines of calls replayed from CUDA graphs instead of the eager ones; ``per_run``: score
    each run (a file, and within it each measurement of a site's sequential baseline) on its own; ``strict``: a
    file that is not results lines raises instead of being noted."""
    if holdout not in HOLDOUTS:
        raise ValueError(f"holdout {holdout!r} must be one of {HOLDOUTS}")
    paths = [Path(p) for p in paths]
    options = {"cluster": cluster, "profile": str(profile) if profile else None, "margin": margin,
               "uncertainty": uncertainty, "holdout": holdout, "lease_profiles": lease_profiles, "per_run": per_run}
    sources: dict = {}
    records, skipped = read_current(paths, all_relays=all_relays, strict=strict, sources=sources)
    other = [r for r in records if captured_line(r) != captured]
    if other:  # one site's eager and captured lines are different measurements of its plans
        records = [r for r in records if captured_line(r) == captured]
        skipped.append(f"{len(other)} lines of {'eager' if captured else 'CUDA graph'} calls left out "
                       f"({'drop' if captured else 'add'} --captured to score them)")
    if not records:
        return {"lines": 0, "scored": [], "summary": None, "notes": skipped, "unpriced": [], "options": options}
    loaded = load_profile(profile, expected=None) if profile else None
    how = {"cluster": cluster, "profile": loaded, "top_k": top_k, "margin": margin, "uncertainty": uncertainty,
           "lease_profiles": lease_profiles}
    if per_run:
        scored, notes = [], []
        for path in dict.fromkeys(sources[id(r)] for r in records):
            mine = [r for r in records if sources[id(r)] == path]
            got, more = score(mine, [path], **how, run_of=run_labels(mine, path))
            scored += got
            notes += more
    else:
        scored, notes = score(records, paths, **how)
    if holdout != "all":
        held = held_out_keys(records)
        scored = [(r, p) for r, p in scored if (r.site.key in held) == (holdout == "held-out")]
    rows = [r for r, _ in scored]
    return {"lines": len(records), "scored": scored, "summary": summarize(rows) if rows else None,
            "notes": skipped + notes,
            "unpriced": [(row.site.key, why) for row in rows for why in row.unpriced], "options": options}


SHORT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}


def print_regret(result: dict) -> None:
    """Print :func:`regret`'s result: the settings, one row per site (or site run), the summary and the notes."""
    o = result["options"]
    if not result["lines"]:
        for note in result["notes"]:
            print(f"note: {note}")
        print("no results lines found; run `hocket bench ... --out` first")
        return
    allowance = ("model-error allowance per plan class (hocket.plan.uncertainty; larger where no profile applies)"
                 if o["uncertainty"] else "no model-error allowance")
    where = ("the lease's of each run where it kept one, else " if o["lease_profiles"] and o["per_run"] else
             "the newest line's lease's where it kept one, else " if o["lease_profiles"] else "")
    print(f"prediction alone: margin {o['margin']:.0%}, {allowance}; profile: {where}{o['profile'] or 'none'} "
          f"(for lines of its device models); sites: {o['holdout']}; "
          f"{'each run scored on its own' if o['per_run'] else 'the runs of one machine pooled, newest line per plan'}")
    header = (f"{'site':<34} {'n':>3} {'best':<22} {'best ms':>9} {'predicted':<22} {'regret':>6} {'vs seq':>6} "
              f"{'tuned':<22} {'regret':>6} {'vs seq':>6} {'noise':>6}")
    print(header)
    print("-" * len(header))
    for row, protocol in sorted(result["scored"], key=lambda rp: (rp[0].site.kind, rp[0].site.m, rp[0].site.k,
                                                                  rp[0].site.n, rp[0].run)):
        s = row.site
        label = f"{s.kind} {s.m}x{s.k}x{s.n} {SHORT_DTYPES.get(s.dtype, s.dtype)} w{s.world}"
        best, chosen, tuned = (protocol_label(p, protocol) for p in (row.best_plan, row.predicted_plan, row.tuned_plan))
        print(f"{label:<34} {row.measured:>3} {best:<22} {row.best_ms:>9.3f} "
              f"{chosen:<22} {row.predicted_regret:>6.3f} {row.predicted_vs_sequential:>6.3f} "
              f"{tuned:<22} {row.tuned_regret:>6.3f} {row.tuned_vs_sequential:>6.3f} "
              f"{row.noise:>6.1%}" + (f"  {row.run}" if row.run else ""))
    s = result["summary"]
    if s is not None:
        print(f"\n{s['sites']} {'site runs' if o['per_run'] else 'sites'} | prediction alone: median regret "
              f"{s['predicted_median']:.3f}, max {s['predicted_max']:.3f}, slower than sequential beyond noise: "
              f"{s['predicted_losses']} | autotuned: median {s['tuned_median']:.3f}, max {s['tuned_max']:.3f}, "
              f"slower than sequential beyond noise: {s['tuned_losses']} | target: regret <= 1.05, 0 losses")
    for note in result["notes"]:
        print(f"note: {note}")
    for key, why in result["unpriced"]:
        print(f"note: {key}: not priced: {why}")


def write_json(result: dict, path: Path | str) -> None:
    """Write :func:`regret`'s rows to ``path`` as JSON (each ``RegretRow.to_dict()`` with its ``peer_protocol``)."""
    dicts = [{**r.to_dict(), "peer_protocol": p} for r, p in result["scored"]]
    Path(path).write_text(json.dumps(dicts, indent=1) + "\n")
