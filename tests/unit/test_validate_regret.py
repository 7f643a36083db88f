"""hocket.validate.regret (``hocket regret``) on synthetic results: hand-computed regrets and losses to
sequential, the machine matching, host-staged pricing, the held-out filter, the command end to end."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path

import pytest
from _results_lines import baselines, record, write

from hocket.cli.main import main as hocket_main
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import fingerprint, load_preset
from hocket.plan.regret import RegretRow
from hocket.validate import regret as pr
from hocket.validate import sites as vs

SEQ = Plan()
PLANS = (SEQ, Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=4),
         Plan(strategy="chunked", chunks=8), Plan(strategy="chunked", chunks=2, order="local_first"),
         Plan(strategy="ring", transport="p2p"))


def _site(rng: random.Random) -> Site:
    return Site(kind=rng.choice(["ag_mm", "mm_rs"]), m=1024 * rng.randint(2, 8), k=1024 * rng.randint(2, 8),
                n=1024 * rng.randint(2, 8), dtype="bfloat16", world=2)


def _row(rng, *, predicted_regret, predicted_vs_seq, tuned_regret=1.0, tuned_vs_seq=1.0, noise=0.01) -> RegretRow:
    best_ms = rng.uniform(1.0, 5.0)
    return RegretRow(site=_site(rng), hardware_hash="hw", measured=4, best_plan=PLANS[1], best_ms=best_ms,
                     sequential_ms=best_ms * 1.2, noise=noise, predicted_plan=PLANS[2],
                     predicted_regret=predicted_regret, predicted_vs_sequential=predicted_vs_seq,
                     tuned_plan=PLANS[1], tuned_regret=tuned_regret, tuned_vs_sequential=tuned_vs_seq)


def test_summary_figures_hand_computed():
    rng = random.Random(21)
    rows = [_row(rng, predicted_regret=1.0, predicted_vs_seq=0.8),
            _row(rng, predicted_regret=1.10, predicted_vs_seq=1.05, tuned_regret=1.04, tuned_vs_seq=1.04),
            _row(rng, predicted_regret=1.02, predicted_vs_seq=1.06, noise=0.08),  # slower, but within its noise
            _row(rng, predicted_regret=1.03, predicted_vs_seq=1.015, tuned_regret=1.01, tuned_vs_seq=1.015)]
    s = pr.summarize(rows)
    assert s["sites"] == 4
    assert s["predicted_median"] == pytest.approx(1.025) and s["predicted_max"] == pytest.approx(1.10)
    assert s["predicted_losses"] == 1  # 1.05 > 1 + max(0.01, 2%); 1.015 is under the 2% floor
    assert s["tuned_median"] == pytest.approx(1.005) and s["tuned_max"] == pytest.approx(1.04)
    assert s["tuned_losses"] == 1
    with pytest.raises(ValueError, match="at least one regret row"):
        pr.summarize([])


def test_lost_to_sequential_uses_noise_with_a_floor():
    assert pr.lost_to_sequential(1.0 + pr.NOISE_FLOOR * 1.5, 0.0)
    assert not pr.lost_to_sequential(1.0 + pr.NOISE_FLOOR * 0.5, 0.0)
    assert not pr.lost_to_sequential(1.05, 0.06) and pr.lost_to_sequential(1.07, 0.06)
    assert not pr.lost_to_sequential(0.9, 0.0)


def _regret_rows(tmp_path, capsys, lines, *extra, cluster="h200x2"):
    path = write(tmp_path / "lines.jsonl", lines)
    out = tmp_path / "rows.json"
    assert hocket_main(["regret", str(path), "--cluster", cluster, "--json", str(out), *extra]) == 0
    return json.loads(out.read_text()), capsys.readouterr().out


STAGED_PLANS = (*PLANS[:5], Plan(strategy="chunked", chunks=4, order="local_first"))
"""NCCL plans; on h200-host-staged the regret prices them as host_staged (GPUs meet through host memory)."""
STAGED_SHAPES = ((8192, 8192, 7168), (4096, 8192, 8192), (8192, 4096, 14336), (2048, 8192, 4096))


def test_main_regret_when_sequential_is_best_and_when_the_choice_is_10pc_slower(tmp_path, capsys):
    rng = random.Random(22)
    sites = [Site(kind=kind, m=m, k=k, n=n, dtype="bfloat16", world=2)
             for kind in ("ag_mm", "mm_rs") for m, k, n in STAGED_SHAPES]
    bases = {site: baselines(rng) for site in sites}
    # 1: every overlap plan ran slower than sequential: autotuning keeps sequential (regret 1.0)
    slow = {(site, p): bases[site].sequential_ms * (1.0 if p == SEQ else rng.uniform(1.3, 1.6))
            for site in sites for p in STAGED_PLANS}
    rows, out = _regret_rows(tmp_path, capsys, [record(site=site, plan=p, median_ms=t, base=bases[site])
                                                for (site, p), t in slow.items()], cluster="h200-host-staged")
    assert len(rows) == len(sites)
    chosen = {}
    for row in rows:
        site = Site.from_dict(row["site"])
        seq_ms = bases[site].sequential_ms
        assert Plan.from_dict(row["best_plan"]) == SEQ and row["best_ms"] == seq_ms
        assert Plan.from_dict(row["tuned_plan"]) == SEQ and row["tuned_regret"] == 1.0
        chosen[site] = Plan.from_dict(row["predicted_plan"])  # the model's pick: measured times play no part
        assert row["predicted_regret"] == pytest.approx(slow[(site, chosen[site])] / seq_ms)
    lost = sum(plan != SEQ for plan in chosen.values())
    assert lost > 0, "the model should expect overlap to pay on some host-staged site (else no loss is counted)"
    assert f"slower than sequential beyond noise: {lost} | autotuned: median 1.000, max 1.000, " \
           f"slower than sequential beyond noise: 0" in out
    # 2: on one site, the model's pick measured 10% slower than the best plan
    site = next(s for s in sites if chosen[s] != SEQ)
    pick = chosen[site]
    best = next(p for p in STAGED_PLANS[1:] if p != pick)
    best_ms = rng.uniform(0.6, 0.8) * bases[site].sequential_ms
    times = {p: best_ms * rng.uniform(1.2, 1.4) for p in STAGED_PLANS}
    times.update({best: best_ms, pick: best_ms * 1.10})
    rows, out = _regret_rows(tmp_path, capsys, [record(site=site, plan=p, median_ms=t, base=bases[site])
                                                for p, t in times.items()], cluster="h200-host-staged")
    (row,) = rows
    assert Plan.from_dict(row["predicted_plan"]) == pick
    assert Plan.from_dict(row["best_plan"]) == best
    assert row["predicted_regret"] == pytest.approx(1.10)
    assert row["predicted_vs_sequential"] == pytest.approx(times[pick] / times[SEQ])
    assert "1 sites | prediction alone: median regret 1.100, max 1.100, slower than sequential beyond noise: 0" in out


def test_holdout_filter_splits_the_rows_as_the_validation_does(tmp_path, capsys):
    rng = random.Random(23)
    frozen = vs.HELD_OUT_SITES[2].split(":")
    m, k, n = (int(x) for x in frozen[1].split("x"))
    sites = [Site(kind=frozen[0], m=m, k=k, n=n, dtype=frozen[2], world=2)] + [_site(rng) for _ in range(5)]
    assert sites[0].key == vs.HELD_OUT_SITES[2]
    lines = []
    for site in sites:
        base = baselines(rng)
        lines += [record(site=site, plan=p, median_ms=base.sequential_ms * rng.uniform(0.7, 1.2), base=base)
                  for p in PLANS]
    keys = lambda rows: {Site.from_dict(r["site"]).key for r in rows}  # noqa: E731
    everything = keys(_regret_rows(tmp_path, capsys, lines)[0])
    held = keys(_regret_rows(tmp_path, capsys, lines, "--holdout", "held-out")[0])
    calibration = keys(_regret_rows(tmp_path, capsys, lines, "--holdout", "calibration")[0])
    assert everything == {s.key for s in sites}
    assert held | calibration == everything and not held & calibration
    assert held == pr.held_out_keys(lines) and sites[0].key in held


def test_same_machine_accepts_transports_added_since_the_line_was_written():
    described = fingerprint(load_preset("h200x2"))
    recorded = copy.deepcopy(described)
    island = recorded["topology"][0]["islands"][0]
    island["transports"] = [t for t in island["transports"] if t != "peer_read"]
    assert pr.same_machine(recorded, described)
    assert not pr.same_machine(described, recorded)  # the line offers a transport the description lacks
    other = copy.deepcopy(described)
    other["devices"] = {"H100 SXM": 2}
    assert not pr.same_machine(other, described)
    wider = copy.deepcopy(recorded)
    wider["topology"][0]["islands"][0]["link_gbps"] = described["topology"][0]["islands"][0]["link_gbps"] * 2
    assert not pr.same_machine(wider, described)


def test_cluster_finder_matches_a_fingerprint_and_notes_an_unknown_one(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(pr, "probe", lambda cpu_ranks: load_preset("cpu-host"))  # this machine: not probed
    rng = random.Random(24)
    site = _site(rng)
    base = baselines(rng)
    known = record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base)
    known = dataclasses.replace(known, hardware=fingerprint(load_preset("h200x2")))
    assert pr.ClusterFinder(None).cluster_for(known).name == "h200x2"
    unknown = dataclasses.replace(known, hardware={**known.hardware, "devices": {"H200 SXM": 3}})
    assert pr.ClusterFinder(None).cluster_for(unknown) is None
    path = write(tmp_path / "unknown.jsonl", [unknown])
    assert hocket_main(["regret", str(path)]) == 0
    assert "no cluster description matches its fingerprint" in capsys.readouterr().out


def test_through_host_prices_nccl_as_host_staged_where_gpus_meet_through_host_memory():
    rng = random.Random(25)
    site = _site(rng)
    asked = []

    def cost(s, plan):
        asked.append(plan.transport)
        return rng.uniform(1.0, 2.0)

    pr.through_host(load_preset("h200-host-staged"), cost)(site, Plan(strategy="chunked", chunks=4))
    pr.through_host(load_preset("h200x2"), cost)(site, Plan(strategy="chunked", chunks=4))
    pr.through_host(load_preset("h200-host-staged"), cost)(site, Plan(strategy="ring", transport="p2p"))
    assert asked == ["host_staged", "collective", "p2p"]


def test_relay_sites_are_scored_with_the_relay_calls_of_their_newest_line():
    """Host-staged lines written before ``run.host_stage_calls`` existed ran one relay call per piece;
    a site whose newer lines ran one call per pipeline keeps those only."""
    rng = random.Random(91)
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2, dtype="bf16")
    plan = Plan(strategy="chunked", chunks=8, order="local_first", transport="host_staged")
    base = baselines(rng)
    lines = [record(site=site, plan=Plan(transport="host_staged"), median_ms=base.sequential_ms, base=base,
                    cluster="h200-host-staged"),
             record(site=site, plan=plan, median_ms=2.5, base=base, cluster="h200-host-staged"),  # per piece (old)
             record(site=site, plan=plan, median_ms=1.2, base=base, cluster="h200-host-staged",
                    run={"host_stage_calls": "one"})]
    kept, calls, notes = pr.one_relay_calls_per_site(lines)
    assert calls == {pr.site_machine(lines[0]): "one"}
    assert kept == [lines[0], lines[2]] and len(notes) == 1 and "scored with one" in notes[0]  # sequential stays


def test_lease_profiles_follow_the_lease_of_each_sites_newest_line(tmp_path):
    from hocket.hardware.profile import CalibrationProfile, CurvePoint, save_profile

    rng = random.Random(26)
    site, other = _site(rng), _site(rng)
    base = baselines(rng)
    runs = tmp_path / "h200x2"
    old = write(runs / "run41" / "bench_multigpu_nvlink.jsonl",
                [record(site=s, plan=SEQ, median_ms=base.sequential_ms, base=base) for s in (site, other)])
    new = write(runs / "run42" / "bench_multigpu_nvlink.jsonl",
                [record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base)])
    save_profile(CalibrationProfile(fingerprint="lease41", p2p=(CurvePoint(bytes=1 << 20, ms=0.3),)),
                 path=runs / "run41" / "profile.json")
    key, other_key = (pr.site_machine(record(site=s, plan=SEQ, median_ms=1.0, base=base)) for s in (site, other))
    leases = pr.newest_lease_profiles([old, new])
    # site's newest line is run42's, whose lease kept no profile; the other site's lease did
    assert key not in leases and leases[other_key].fingerprint == "lease41"
    leases = pr.newest_lease_profiles([new, old])  # read in this order, run41's line is the newest
    assert leases[key].fingerprint == "lease41"
    finder = pr.ClusterFinder(None, None, lease_profiles=leases)
    assert finder.profile_for(record(site=site, plan=SEQ, median_ms=1.0, base=base)).fingerprint == "lease41"


def test_main_per_run_scores_each_file_apart_and_labels_it(tmp_path, capsys):
    """Two runs of one site: pooled, the newer file's lines win per plan and one row is scored; with
    --per-run each file is a row of its own, labelled with the file, and the older run's loss shows."""
    rng = random.Random(26)
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, dtype="bfloat16", world=2)
    plans = (SEQ, Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=4))
    old_base, new_base = baselines(rng, sequential_ms=2.0), baselines(rng, sequential_ms=2.1)
    old = write(tmp_path / "old.jsonl", [record(site=site, plan=p, median_ms=2.0 if p == SEQ else 3.0, base=old_base)
                                         for p in plans])
    new = write(tmp_path / "new.jsonl", [record(site=site, plan=p, median_ms=2.1 if p == SEQ else 1.5, base=new_base)
                                         for p in plans])
    pooled = tmp_path / "pooled.json"
    assert hocket_main(["regret", str(old), str(new), "--cluster", "h200x2", "--json", str(pooled)]) == 0
    rows = json.loads(pooled.read_text())
    assert len(rows) == 1 and rows[0]["run"] == "" and rows[0]["best_ms"] == 1.5
    apart = tmp_path / "apart.json"
    assert hocket_main(["regret", str(old), str(new), "--cluster", "h200x2", "--per-run", "--json", str(apart)]) == 0
    out = capsys.readouterr().out
    rows = {Path(r["run"]).name: r for r in json.loads(apart.read_text())}
    assert set(rows) == {"old.jsonl", "new.jsonl"}
    assert rows["old.jsonl"]["best_ms"] == 2.0 and rows["new.jsonl"]["best_ms"] == 1.5
    chose = Plan.from_dict(rows["old.jsonl"]["predicted_plan"])
    assert rows["old.jsonl"]["predicted_regret"] == pytest.approx(1.0 if chose == SEQ else 1.5)
    assert "2 site runs" in out and "each run scored on its own" in out and "old.jsonl" in out
