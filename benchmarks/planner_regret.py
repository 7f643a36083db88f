"""Planner regret over every site measured under benchmarks/results/ (see hocket.plan.regret).

For each measured site: the measured time of the plan chosen by prediction alone
(autotune off) over the best measured plan, the same with autotune on (top-k predicted
plus sequential, decided by measurement), and both against measured sequential.
Targets (issue 4): prediction-alone regret <= 1.05; never slower than sequential beyond
noise in either mode.

  python -m benchmarks.planner_regret                       # every *.jsonl under benchmarks/results
  python -m benchmarks.planner_regret results.jsonl --cluster cpu-host --json regret.json

The cluster each line was measured on is found by matching its hardware fingerprint
(devices, topology, nodes, network) against this machine's probe and the presets;
``--cluster`` names it instead.

A ``chunked`` plan over ``copy_engine`` runs one of several peer protocols
(``hocket.core.peer_protocol``); a site is scored under the protocol its copy-engine lines ran
(validate_cost.line_protocol: push for lines older than ``run.peer_protocol``): the candidates are
priced with it and only its lines are looked up. A site with lines of several protocols is scored
with the protocol of the line read last (the newest, by the order of the files given), with a note.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

from hocket.hardware import fingerprint, list_presets, load_cluster, load_preset, probe
from hocket.plan.labels import plan_label
from hocket.plan.regret import machine_key, planner_regret
from hocket.plan.search import predict_cost_fn
from hocket.plan.uncertainty import uncertainty_from_profile

RESULTS = Path(__file__).resolve().parent / "results"
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
    added to the presets after the 2xH200 runs 1-5): the described ones must include the recorded."""
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
    buffers: the host_staged path), as benchmarks/validate_cost.py does."""

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
    """:func:`one_mode_per_site` for the copy-engine peer protocol (``validate_cost.line_protocol``)."""
    from benchmarks.validate_cost import line_protocol

    return one_mode_per_site(records, line_protocol, "copy-engine")


def one_relay_calls_per_site(records) -> tuple[list, dict[tuple[str, str], str], list[str]]:
    """:func:`one_mode_per_site` for how the relay lines' pipelines called the relay
    (``validate_cost.line_calls``: ``piece`` for every line before run34, ``one`` since), so that a site is
    scored with lines of the executor its newest line ran."""
    from benchmarks.validate_cost import line_calls

    return one_mode_per_site(records, line_calls, "host-staged (relay calls)")


def with_protocol(protocol: str | None, cost):
    """``cost`` pricing every copy-engine ``chunked`` plan with ``protocol`` as its ``Plan.protocol``;
    ``cost`` itself for None."""
    if protocol is None:
        return cost
    from benchmarks.validate_cost import with_plan_protocol

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
        its run timed calls back to back: ``validate_cost.steady_line``)."""
        cluster = self.cluster_for(record)
        if cluster is None:
            return None
        from benchmarks.validate_cost import captured_line, steady_line

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
    """``site_machine`` key -> the calibration profile of the lease (``validate_cost.lease_profile_path``)
    of the site's last line in ``paths`` (read in order), for the sites whose newest line's lease kept one."""
    from benchmarks.validate_cost import lease_profile_path, read_current
    from hocket.hardware.profile import load_profile

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
    with another protocol than push (unmarked copy-engine plans ran push, as every line before run14)."""
    label = plan_label(plan)
    if plan.strategy == "chunked" and plan.transport == "copy_engine" and protocol not in (None, "push"):
        return f"{label} ~{protocol}"
    return label


def held_out_keys(records) -> set[str]:
    """Site keys benchmarks/validate_cost.py holds out (its frozen split)."""
    from benchmarks.validate_cost import held_out_site

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


def score(records, lease_paths, args, profile, run_of=None) -> tuple[list, list[str]]:
    """(regret row, the copy-engine protocol its site was scored with) for ``records`` (one copy-engine
    protocol and one relay calling mode per site: the newest line's), and notes. ``lease_paths``: the
    files whose leases' profiles price the lines (``--lease-profiles``)."""
    records, protocols, protocol_notes = one_protocol_per_site(records)
    records, _, calls_notes = one_relay_calls_per_site(records)
    leases = newest_lease_profiles(lease_paths) if args.lease_profiles else {}
    finder = ClusterFinder(args.cluster, profile, protocols, leases)
    rows, notes = planner_regret(records, finder.cost_for, top_k=args.top_k, margin=args.margin,
                                 uncertainty_for=None if args.no_uncertainty else finder.uncertainty_for,
                                 run_of=run_of)
    return [(r, protocols.get((r.site.key, r.hardware_hash))) for r in rows], protocol_notes + calls_notes + notes


def run_labels(records, path) -> Callable[[object], str]:
    """A line of ``path`` -> its run's label: the file (below results/), and where the file holds several
    measurements of a site's sequential baseline (several invocations appended), ``#i`` in their order."""
    path = Path(path)
    try:
        label = str(path.resolve().relative_to(RESULTS))
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("paths", nargs="*", help="results JSON-lines files (default: every *.jsonl under results/)")
    parser.add_argument("--cluster", default=None, help="cluster preset or YAML all lines were measured on")
    parser.add_argument("--profile", default=None, help="calibration profile JSON to predict with (that machine's)")
    parser.add_argument("--top-k", type=int, default=4, help="plans autotuning times besides sequential (default 4)")
    parser.add_argument("--margin", type=float, default=0.03, help="saving a plan needs over sequential")
    parser.add_argument("--no-uncertainty", action="store_true",
                        help="prediction alone with the plain margin (no per-class model-error allowance)")
    parser.add_argument("--holdout", choices=("all", "held-out", "calibration"), default="all",
                        help="score every site, or only validate_cost.py's held-out third (or the rest)")
    parser.add_argument("--all-relays", action="store_true",
                        help="also score host_staged lines of earlier relays (validate_cost.py's CURRENT_RELAY "
                             "rule; by default they are skipped: no executor runs them any more)")
    parser.add_argument("--lease-profiles", action="store_true",
                        help="price each site with the profile calibrated on the lease of its newest line "
                             "(validate_cost.lease_profile_path) where that lease kept one; --profile elsewhere")
    parser.add_argument("--captured", action="store_true",
                        help="score the lines of calls replayed from CUDA graphs (benchmarks/bench_captured.py), "
                             "priced as such, instead of the eager ones")
    parser.add_argument("--per-run", action="store_true",
                        help="score each run (a results file, and within it each measurement of a site's "
                             "sequential baseline) on its own, priced with that run's lease profile under "
                             "--lease-profiles; by default the runs of one machine are pooled, newest line per plan")
    parser.add_argument("--json", default=None, help="also write the rows as JSON to this file")
    args = parser.parse_args(argv)
    paths = [Path(p) for p in args.paths] or sorted(RESULTS.rglob("*.jsonl"))
    from benchmarks.validate_cost import read_current

    sources: dict = {}
    records, skipped = read_current(paths, all_relays=args.all_relays, strict=bool(args.paths), sources=sources)
    from benchmarks.validate_cost import captured_line

    other = [r for r in records if captured_line(r) != args.captured]
    if other:  # one site's eager and captured lines are different measurements of its plans
        records = [r for r in records if captured_line(r) == args.captured]
        skipped.append(f"{len(other)} lines of {'eager' if args.captured else 'CUDA graph'} calls left out "
                       f"({'drop' if args.captured else 'add'} --captured to score them)")
    if not records:
        print(f"no results lines found in {', '.join(map(str, paths)) or RESULTS}; run `hocket bench ... --out` first")
        return 0
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    if args.per_run:
        scored, notes = [], []
        for path in dict.fromkeys(sources[id(r)] for r in records):
            mine = [r for r in records if sources[id(r)] == path]
            got, more = score(mine, [path], args, profile, run_of=run_labels(mine, path))
            scored += got
            notes += more
    else:
        scored, notes = score(records, paths, args, profile)
    if args.holdout != "all":
        held = held_out_keys(records)
        scored = [(r, p) for r, p in scored if (r.site.key in held) == (args.holdout == "held-out")]
    rows = [r for r, _ in scored]
    allowance = ("no model-error allowance" if args.no_uncertainty else
                 "model-error allowance per plan class (hocket.plan.uncertainty; larger where no profile applies)")
    where = ("the lease's of each run where it kept one, else " if args.lease_profiles and args.per_run else
             "the newest line's lease's where it kept one, else " if args.lease_profiles else "")
    print(f"prediction alone: margin {args.margin:.0%}, {allowance}; profile: {where}{args.profile or 'none'} "
          f"(for lines of its device models); sites: {args.holdout}; "
          f"{'each run scored on its own' if args.per_run else 'the runs of one machine pooled, newest line per plan'}")
    header = (f"{'site':<34} {'n':>3} {'best':<22} {'best ms':>9} {'predicted':<22} {'regret':>6} {'vs seq':>6} "
              f"{'tuned':<22} {'regret':>6} {'vs seq':>6} {'noise':>6}")
    print(header)
    print("-" * len(header))
    for row, protocol in sorted(scored, key=lambda rp: (rp[0].site.kind, rp[0].site.m, rp[0].site.k, rp[0].site.n,
                                                          rp[0].run)):
        s = row.site
        short = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(s.dtype, s.dtype)
        label = f"{s.kind} {s.m}x{s.k}x{s.n} {short} w{s.world}"
        best, chosen, tuned = (protocol_label(p, protocol) for p in (row.best_plan, row.predicted_plan, row.tuned_plan))
        print(f"{label:<34} {row.measured:>3} {best:<22} {row.best_ms:>9.3f} "
              f"{chosen:<22} {row.predicted_regret:>6.3f} {row.predicted_vs_sequential:>6.3f} "
              f"{tuned:<22} {row.tuned_regret:>6.3f} {row.tuned_vs_sequential:>6.3f} "
              f"{row.noise:>6.1%}" + (f"  {row.run}" if row.run else ""))
    if rows:
        s = summarize(rows)
        print(f"\n{s['sites']} {'site runs' if args.per_run else 'sites'} | prediction alone: median regret {s['predicted_median']:.3f}, "
              f"max {s['predicted_max']:.3f}, slower than sequential beyond noise: {s['predicted_losses']} | "
              f"autotuned: median {s['tuned_median']:.3f}, max {s['tuned_max']:.3f}, "
              f"slower than sequential beyond noise: {s['tuned_losses']} | target: regret <= 1.05, 0 losses")
    for note in skipped + notes:
        print(f"note: {note}")
    for row in rows:
        for why in row.unpriced:
            print(f"note: {row.site.key}: not priced: {why}")
    if args.json:
        dicts = [{**r.to_dict(), "peer_protocol": p} for r, p in scored]
        Path(args.json).write_text(json.dumps(dicts, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
