"""hocket.validate.cost_model (``hocket validate``) on synthetic results files: the frozen held-out split, the
current-executor filter, run-to-run noise, the calibration profile, and the command end to end."""

from __future__ import annotations

import dataclasses
import json
import random
import statistics

import pytest
from _results_lines import baselines, record, write

from hocket.cli.main import main as hocket_main
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.validate import cost_model as vc
from hocket.validate import lines as vl
from hocket.validate import sites as vs

SEQ = Plan()
OVERLAP_PLANS = (Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=4),
                 Plan(strategy="chunked", chunks=2, order="local_first"))


def _new_site(rng: random.Random, kind: str = "ag_mm") -> Site:
    return Site(kind=kind, m=256 * rng.randint(4, 40), k=256 * rng.randint(4, 40), n=256 * rng.randint(4, 40),
                dtype="bfloat16", world=2)


def _site_of(key: str) -> Site:
    """The Site a frozen key names (kind:mxkxn:dtype:wW:direction:hash); the test fails if the key format moved."""
    kind, shape, dtype, world, direction, _ = key.split(":")
    m, k, n = (int(x) for x in shape.split("x"))
    site = Site(kind=kind, m=m, k=k, n=n, dtype=dtype, world=int(world[1:]), direction=direction)
    assert site.key == key
    return site


def _site_run(rng, site, *, plans=(SEQ, *OVERLAP_PLANS), cluster="h200x2", near=False, **kw):
    """One run of a site: every plan of ``plans`` against shared random baselines (``near``: the
    first overlap plan within 1% of sequential, inside the noise)."""
    base = baselines(rng)
    times = {p: base.sequential_ms if p == SEQ else base.sequential_ms * rng.uniform(0.7, 1.2) for p in plans}
    if near:
        times[plans[1]] = base.sequential_ms * rng.uniform(0.99, 1.01)
    return [record(site=site, plan=p, median_ms=t, base=base, cluster=cluster, **kw) for p, t in times.items()]


def test_frozen_sites_keep_their_side_for_any_step():
    for step in (1, 2, 3, 5):
        assert all(vs.held_out_site(key, step) for key in vs.HELD_OUT_SITES)
        # step 1 would hold out every new site: the frozen calibration sites still calibrate
        assert not any(vs.held_out_site(key, step) for key in vs.CALIBRATION_SITES)
    assert not set(vs.HELD_OUT_SITES) & set(vs.CALIBRATION_SITES)


def test_new_site_side_depends_on_its_key_only():
    rng = random.Random(11)
    keys = list(dict.fromkeys(_new_site(rng, rng.choice(["ag_mm", "mm_rs", "mm_ar"])).key for _ in range(300)))
    first = {key: vs.held_out_site(key, 3) for key in keys}
    rng.shuffle(keys)
    assert {key: vs.held_out_site(key, 3) for key in keys} == first
    assert all(vs.held_out_site(key, 1) for key in keys)
    share = sum(first.values()) / len(first)
    assert 0.2 < share < 0.47, f"about a third of new sites should be held out, got {share:.2f}"


def test_split_keeps_every_run_of_a_site_on_one_side():
    rng = random.Random(12)
    frozen_held = _site_of(vs.HELD_OUT_SITES[2])
    frozen_calib = _site_of(vs.CALIBRATION_SITES[0])
    sites = [frozen_held, frozen_calib] + [_new_site(rng) for _ in range(8)]
    records = [r for site in sites for _ in range(rng.randint(2, 3)) for r in _site_run(rng, site)]
    rng.shuffle(records)
    groups, notes = vs.group_sites(records, None)
    assert not notes
    assert len(groups) == len({(r.site.key, r.baselines.sequential_ms) for r in records})  # one group per run
    calibration, held = vs.split_holdout(groups, 1 / 3)
    assert len(calibration) + len(held) == len(groups)
    assert not {id(g) for g in calibration} & {id(g) for g in held}
    held_keys = {g.site.key for g in held}
    assert not held_keys & {g.site.key for g in calibration}
    assert frozen_held.key in held_keys and frozen_calib.key not in held_keys
    # taking sites away never moves the others
    fewer = [g for g in groups if g.site.key != sites[-1].key]
    assert {g.site.key for g in vs.split_holdout(fewer, 1 / 3)[1]} == held_keys - {sites[-1].key}


def test_read_current_drops_host_staged_lines_of_old_relays_and_runs(tmp_path):
    rng = random.Random(13)
    site = _new_site(rng)
    base = baselines(rng)
    staged = Plan(strategy="chunked", chunks=4, transport="host_staged")

    def line(plan, method=None):
        return record(site=site, plan=plan, median_ms=base.sequential_ms * rng.uniform(0.8, 1.1), base=base,
                      cluster="h200-host-staged", run={"method": method} if method else None)

    current_dir = tmp_path / vl.CURRENT_RELAY_RUNS[-1]
    current = [line(staged, f"chunked(4) {vl.CURRENT_RELAY}"), line(staged), line(SEQ, "sequential")]
    other_relay = [line(staged, "chunked(4) @16MB,thread=1")]
    old = [line(staged), line(staged, f"chunked(4) {vl.CURRENT_RELAY}")]  # right tag, but an old run folder
    old_kept = [line(SEQ), line(Plan(strategy="chunked", chunks=2))]  # not host_staged: always current
    new_path = write(current_dir / "bench.jsonl", current + other_relay)
    old_path = write(tmp_path / "h200x2" / "first_run" / "bench.jsonl", old + old_kept)
    records, notes = vl.read_current([new_path, old_path])
    assert [r.median_ms for r in records] == [r.median_ms for r in current + old_kept]
    assert len(notes) == 1 and notes[0].startswith("3 host_staged lines")
    everything, notes = vl.read_current([new_path, old_path], all_relays=True)
    assert len(everything) == len(current + other_relay + old + old_kept) and not notes


def test_a_one_rank_line_on_one_gpu_of_a_two_gpu_host_is_an_h200x1_line():
    """bench_single_gpu run on a 2xH200 lease (h200 runs 5-6) writes devices {H200 SXM: 2} and no
    run.cluster: its one-rank sites ran on one GPU, so they are tabled (and priced) as h200x1."""
    rng = random.Random(20)
    offload = Site(kind=rng.choice(["h2d_mm", "mm_d2h"]), m=256 * rng.randint(8, 32), k=256 * rng.randint(8, 32),
                   n=256 * rng.randint(8, 32), dtype="bfloat16", world=1)
    pair = _new_site(rng)
    lines = []
    for site in (offload, pair):
        line = record(site=site, plan=Plan(transport="host_staged") if site.world == 1 else SEQ,
                      median_ms=rng.uniform(1.0, 5.0), base=baselines(rng), cluster="h200x2")
        lines.append(dataclasses.replace(line, run={}, hardware={**line.hardware, "world_size": 2}))
    assert lines[0].hardware["devices"] == {"H200 SXM": 2}
    assert vs.devices_used(lines[0]) == ({"H200 SXM": 1}, 1)
    assert vs.devices_used(lines[1]) == ({"H200 SXM": 2}, 2)
    cache: dict = {}
    assert [vs.find_cluster(line, None, cache).name for line in lines] == ["h200x1", "h200x2"]
    groups, notes = vs.group_sites(lines, None)
    assert not notes and sorted(g.cluster.name for g in groups) == ["h200x1", "h200x2"]


def test_a_malformed_file_is_noted_and_skipped_not_crashed_on(tmp_path, capsys):
    rng = random.Random(14)
    good = write(tmp_path / "good.jsonl", _site_run(rng, _new_site(rng)))
    bad = write(tmp_path / "bad.jsonl", _site_run(rng, _new_site(rng))[:1])
    with bad.open("a") as handle:
        handle.write('{"site": {"kind": "ag_mm"}, "plan": \n')
    records, notes = vl.read_current([bad, good])
    assert len(records) == 1 + len(OVERLAP_PLANS)
    assert len(notes) == 1 and f"{bad}:2" in notes[0] and "not valid JSON" in notes[0]
    with pytest.raises(ValueError, match="bad.jsonl:2"):
        vl.read_current([bad, good], strict=True)
    assert hocket_main(["validate", str(bad), str(good)]) == 0
    out = capsys.readouterr().out
    assert f"note: {bad} skipped" in out and "held-out sites" in out


def test_run_to_run_spread_of_one_plan_in_two_runs(tmp_path):
    rng = random.Random(15)
    site, plan = _new_site(rng), OVERLAP_PLANS[0]
    a, b = rng.uniform(1.0, 3.0), rng.uniform(3.0, 5.0)
    lines = []
    for ms, commit in ((a, "aaaa"), (b, "bbbb")):
        base = baselines(rng)
        lines += [record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base, git_hash=commit,
                         run={"method": "seq-" + commit}),  # a different method: not paired
                  record(site=site, plan=plan, median_ms=ms, base=base, git_hash=commit)]
    lines.append(record(site=site, plan=OVERLAP_PLANS[1], median_ms=a, base=base))  # measured once
    groups, _ = vs.group_sites(lines, None)
    noise = vc.run_to_run(groups)
    middle = (a + b) / 2
    assert noise["plans"] == 1 and noise["lines"] == 2
    assert noise["median_deviation"] == pytest.approx((b - a) / 2 / middle)
    assert noise["max_deviation"] == pytest.approx((b - a) / 2 / middle)
    assert noise["median_spread"] == pytest.approx(b / a - 1) and noise["max_spread"] == pytest.approx(b / a - 1)
    same = vc.run_to_run(groups, same_commit=True)  # two commits: nothing to compare
    assert same["plans"] == 0 and same["median_spread"] is None
    # a third run moves the median to the middle time
    c = rng.uniform(5.0, 7.0)
    base = baselines(rng)
    groups, _ = vs.group_sites(lines + [record(site=site, plan=plan, median_ms=c, base=base)], None)
    three = vc.run_to_run(groups)
    assert three["lines"] == 3
    assert three["max_deviation"] == pytest.approx(max(1 - a / b, c / b - 1))
    assert three["median_deviation"] == pytest.approx(statistics.median([1 - a / b, 0.0, c / b - 1]))
    assert three["max_spread"] == pytest.approx(c / a - 1)


def test_calibration_profile_takes_only_the_given_groups_baselines():
    rng = random.Random(16)
    collective = _site_run(rng, _new_site(rng))
    pushed = [record(site=_new_site(rng, "mm_rs"), plan=SEQ, median_ms=base.sequential_ms, base=base)
              for base in [baselines(rng, comm_transport="copy_engine")]]
    host = _site_run(rng, Site(kind="h2d_mm", m=256 * rng.randint(4, 30), k=4096, n=4096, dtype="bfloat16"),
                     plans=(SEQ,), cluster="h200x1")
    groups, _ = vs.group_sites(collective + pushed + host, None)
    profile = vc.calibration_profile(groups, None)
    assert len(profile.gemm) == 3
    for g in groups:
        b = g.records[0].baselines
        point = next(p for p in profile.gemm if p.m == g.site.m and p.k == g.site.k)
        assert point.ms == b.compute_alone_ms
        assert point.tflops == pytest.approx(g.site.flops / (b.compute_alone_ms * 1e9))
    # the all-gather curve holds the collective run only; a copy-engine comm-alone is no NCCL point
    assert [p.ms for p in profile.collectives["all_gather"]] == [collective[0].baselines.comm_alone_ms]
    assert "reduce_scatter" not in profile.collectives
    assert [p.ms for p in profile.host_link] == [host[0].baselines.comm_alone_ms]


def test_main_end_to_end_on_a_tiny_file_set(tmp_path, capsys):
    rng = random.Random(17)
    sites = [_site_of(vs.HELD_OUT_SITES[2]), _site_of(vs.CALIBRATION_SITES[0]), _new_site(rng), _new_site(rng)]
    lines = [r for site in sites for r in _site_run(rng, site, near=True)]
    paths = [write(tmp_path / "a.jsonl", lines[:8]), write(tmp_path / "b.jsonl", lines[8:])]
    out_json = tmp_path / "report.json"
    assert hocket_main(["validate", *map(str, paths), "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert "## h200x2" in out and "targets: median <= 10%" in out
    report = json.loads(out_json.read_text())["h200x2"]
    held_lines = [r for r in lines if vs.held_out_site(r.site.key, 3)]
    assert 0 < len(held_lines) < len(lines)  # the frozen sites put one on each side
    summary = report["held_out"]["summary"]
    assert summary["points"] == len(held_lines) and summary["sites"] == len({r.site.key for r in held_lines})
    assert report["calibration"]["summary"]["points"] == len(lines) - len(held_lines)
    assert f"held-out sites (calibrated on {len(sites) - summary['sites']} other" in out
    measured = {(r.site.key, r.plan.describe()): r.median_ms for r in lines}
    for point in report["held_out"]["points"]:
        assert point["measured_ms"] == measured[(point["site"], point["plan"])]
        assert point["error"] == pytest.approx(point["predicted_ms"] / point["measured_ms"] - 1)
    seq = {r.site.key: r.baselines.sequential_ms for r in lines}
    signs = report["held_out"]["signs"] + report["calibration"]["signs"]
    assert len(signs) == len(lines) - len(seq)  # every overlap plan, none for sequential
    assert any(s["within_noise"] for s in signs) and not all(s["within_noise"] for s in signs)
    for sign in signs:
        saving = 1 - measured[(sign["site"], sign["plan"])] / seq[sign["site"]]
        assert sign["measured"] == pytest.approx(saving)
        assert sign["within_noise"] == (abs(saving) < vc.NOISE_FLOOR)  # the lines' p10-p90 spread is 1%
        assert sign["right"] == ((saving > 0) == (sign["predicted"] > 0))
    clear = [s for s in report["held_out"]["signs"] if not s["within_noise"]]
    if clear:
        assert summary["sign_right"] == pytest.approx(sum(s["right"] for s in clear) / len(clear))
    for best in report["held_out"]["bests"] + report["calibration"]["bests"]:
        mine = {plan: ms for (key, plan), ms in measured.items() if key == best["site"]}
        assert mine[best["measured_best"]] == min(mine.values())
        assert best["regret"] == pytest.approx(mine[best["predicted_best"]] / min(mine.values()))


def _steady_runs(rng, sites, ratio: float, profile):
    """One steady run (run.reps=8) of each site whose compute-alone is ``ratio`` x the profile's burst price."""
    from hocket.cost.calibration import CalibrationView
    from hocket.cost.compute import gemm_ms
    from hocket.hardware import load_preset

    device = load_preset("h200x2").device(0)
    lines = []
    for site in sites:
        burst = gemm_ms(device, m=site.m, k=site.k, n=site.n, dtype=site.dtype, itemsize=site.itemsize,
                        calibration=CalibrationView(profile))
        base = baselines(rng)
        base = dataclasses.replace(base, compute_alone_ms=burst * ratio * rng.uniform(0.995, 1.005))
        lines.append(record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base, run={"reps": 8}))
    return lines


def test_sustained_ceiling_is_derived_from_the_given_cap_bound_steady_runs_only():
    from hocket.hardware.profile import CalibrationProfile, GemmPoint, SustainedGemm

    rng = random.Random()
    base = CalibrationProfile(fingerprint="f", gemm=(GemmPoint(m=8192, k=8192, n=8192, dtype="bfloat16",
                                                               tflops=rng.uniform(700, 760), ms=1.5),))
    large = [Site(kind="ag_mm", m=8192, k=1024 * rng.randint(6, 16), n=1024 * rng.randint(6, 16), dtype="bfloat16",
                  world=2) for _ in range(3)]
    small = [Site(kind="ag_mm", m=2048, k=1024, n=1024 * rng.randint(1, 2), dtype="bfloat16", world=2)]
    held = _steady_runs(rng, large, rng.uniform(1.05, 1.12), base)
    free = _steady_runs(rng, large[:1], 1.0, base) + _steady_runs(rng, small, 1.3, base)  # not cap-bound / small
    groups, _ = vs.group_sites(held + free, None)
    derived = vc.derived_sustained(groups, base)
    rates = sorted(r.site.flops / (r.baselines.compute_alone_ms * 1e9) for r in held)
    assert derived is not None and derived.tflops == pytest.approx(rates[1])  # the median cap-bound run
    assert vc.derived_sustained([g for g in groups if g.records[0] in free], base) is None
    assert vc.derived_sustained(groups, None) is None
    merged = vc.calibration_profile(groups, base)
    assert merged.gemm_sustained == derived
    for g in groups:  # steady baselines are GEMM points as measured
        b = g.records[0].baselines
        assert any(p.ms == b.compute_alone_ms for p in merged.gemm if (p.m, p.k) == (g.site.m, g.site.k))
    # their comm-alone was timed back to back: a steady curve point, not a from-idle one
    assert sorted(p.ms for p in merged.collectives_steady["all_gather"]) == \
        sorted(g.records[0].baselines.comm_alone_ms for g in groups)
    assert "all_gather" not in merged.collectives
    measured = SustainedGemm(m=8192, k=8192, n=8192, dtype="bfloat16", burst_ms=1.5, sustained_ms=1.6,
                             duration_s=2.0)
    with_field = dataclasses.replace(base, gemm_sustained=measured)
    assert vc.derived_sustained(groups, with_field) is None
    assert vc.calibration_profile(groups, with_field).gemm_sustained == measured
    assert "measured by hocket calibrate" in vc.sustained_note(vc.calibration_profile(groups, with_field), with_field)
    assert "derived from the calibration sites only" in vc.sustained_note(merged, base)


def test_nccl_through_host_is_priced_as_nccl_only_with_a_profile_timed_through_host():
    from hocket.hardware.profile import CalibrationProfile

    rng = random.Random(77)
    site = _new_site(rng)
    base = baselines(rng)
    lines = [record(site=site, plan=p, median_ms=base.sequential_ms, base=base, cluster="h200-host-staged")
             for p in (SEQ, Plan(strategy="chunked", chunks=4, transport="host_staged"))]
    (group,), _ = vs.group_sites(lines, None)
    through_host = CalibrationProfile(fingerprint="toy", fingerprint_data={"env": {"NCCL_P2P_DISABLE": "1"}})
    nvlink = CalibrationProfile(fingerprint="toy", fingerprint_data={"env": {"NCCL_NVLS_ENABLE": "0"}})
    assert vs.through_host_profile(through_host) and not vs.through_host_profile(nvlink)
    assert not vs.through_host_profile(None)
    plan, cluster = group.pricing(SEQ, through_host)  # NCCL's own transport through host memory
    assert plan == SEQ and cluster.name == vs.NCCL_THROUGH_HOST["h200-host-staged"]
    plan, cluster = group.pricing(SEQ, nvlink)  # curves of NCCL over NVLink say nothing of it: the relay's call
    assert plan.transport == "host_staged" and cluster is group.cluster
    relay = Plan(strategy="chunked", chunks=4, transport="host_staged")
    assert group.pricing(relay, through_host) == (relay, group.cluster)  # hocket's own plans stay on the cluster


def test_a_plan_measured_twice_counts_once_at_its_median_on_both_sides():
    """The bench times the planner's choice again after its candidates: the same plan on two lines
    (0.343 and 0.218 ms in h200x2 run81). Regret compares plans, each at the median of its lines, so
    a plan that is both the predicted and the measured best has regret 1.0, not 0.343 / 0.218."""
    rng = random.Random(21)
    site, fast, other = _new_site(rng), OVERLAP_PLANS[0], OVERLAP_PLANS[1]
    base = baselines(rng)
    seq = base.sequential_ms
    lines = [record(site=site, plan=SEQ, median_ms=seq, base=base),
             record(site=site, plan=fast, median_ms=0.9 * seq, base=base),
             record(site=site, plan=other, median_ms=0.8 * seq, base=base),
             record(site=site, plan=fast, median_ms=0.5 * seq, base=base)]
    priced = [(lines[0], 1.0), (lines[1], 0.4), (lines[2], 0.6), (lines[3], 0.4)]
    best = vc.best_of(site.key, priced)
    assert best["predicted_best"] == best["measured_best"] == vl.line_label(lines[1])
    assert best["right"] and best["regret"] == 1.0  # median 0.7 x seq beats the other plan's 0.8
    slower = [(lines[0], 1.0), (lines[1], 0.4), (lines[2], 0.6), (record(site=site, plan=fast, median_ms=0.8 * seq,
                                                                          base=base), 0.4)]
    best = vc.best_of(site.key, slower)  # median 0.85 x seq: the other plan is best, regret 0.85 / 0.8
    assert best["measured_best"] == vl.line_label(lines[2]) and not best["right"]
    assert best["regret"] == pytest.approx(0.85 / 0.8)


@pytest.mark.parametrize(("command", "run", "replayed"), [
    ("hocket bench ag_mm --m 8192 --k 4096 --n 1536 --world 2 --graph --out x.jsonl", {}, True),
    ("/usr/local/bin/hocket bench mm_rs --graph", {}, True),
    ("hocket bench ag_mm --m 8192 --world 2", {}, False),
    ("hocket bench ag_mm --graph", {"captured": False}, False),  # what the line says wins over its command
    ("hocket demo --graph", {}, False),
    ("benchmarks/bench_eager_graphs.py --link nvlink --graphs-first", {}, False),
    ("benchmarks/bench_multigpu.py --link nvlink --graph", {"captured": True}, True),
    ("hocket bench ag_mm 'unclosed", {}, False),
])
def test_a_line_is_a_replay_where_it_says_so_or_where_hocket_bench_ran_with_graph(command, run, replayed):
    """``hocket bench --graph`` lines written before ``run.captured`` existed (2xH200 runs 44, 49, 51) are replays."""
    rng = random.Random(7)
    site = _new_site(rng)
    line = dataclasses.replace(record(site=site, plan=SEQ, median_ms=1.0, base=baselines(rng), run=run),
                               command=command)
    assert vl.captured_line(line) is replayed
    assert vl.line_label(line).endswith(" [graph]") is replayed
