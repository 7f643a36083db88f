"""hocket.validate.allowances (``hocket validate --allowances``): the per-class allowance is the percentile of the model
errors planted in synthetic results of calibration sites (held-out sites are never read)."""

from __future__ import annotations

import random
import re

import pytest
from _results_lines import baselines, record, write

from hocket.cli.main import main as hocket_main
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.calibration import calibration_view
from hocket.hardware import load_preset
from hocket.plan.uncertainty import DEFAULT_MAX_ERROR, DEFAULT_PER_PIECE_ERROR, DEFAULT_REL_ERROR, plan_pieces
from hocket.strategies import predict
from hocket.validate import allowances as du
from hocket.validate import lines as vl
from hocket.validate import sites as vs

SEQ = Plan()
BY_CLASS = {"pipelined": Plan(strategy="chunked", chunks=4), "ring": Plan(strategy="ring", transport="p2p"),
            "tile_fused": Plan(strategy="tile_fused", chunks=4)}
"""One plan per class the synthetic sites measure (copy_engine and host_staged get no points)."""


def test_percentile_hand_computed():
    assert du.percentile([4.0, 1.0, 3.0, 2.0], 75) == pytest.approx(3.25)
    assert du.percentile([4.0, 1.0, 3.0, 2.0], 50) == pytest.approx(2.5)
    assert du.percentile([4.0, 1.0, 3.0, 2.0], 0) == 1.0 and du.percentile([4.0, 1.0, 3.0, 2.0], 100) == 4.0
    assert du.percentile([-0.3], 75) == -0.3
    with pytest.raises(ValueError, match="empty"):
        du.percentile([], 75)
    with pytest.raises(ValueError, match=r"q=101"):
        du.percentile([1.0], 101)


def test_constants_are_the_percentile_floored_capped_and_rounded():
    rng = random.Random(31)
    errors = {"pipelined": [rng.uniform(0.01, 0.2) for _ in range(5)],
              "ring": [rng.uniform(-0.2, -0.01) for _ in range(5)],  # the model over-prices: no allowance
              "tile_fused": [rng.uniform(0.5, 0.9) for _ in range(5)],
              "host_staged": [rng.uniform(0.0, 0.25) for _ in range(4)],
              "copy_engine": []}
    derived = du.derive_constants(errors, 75)
    assert derived["sequential"] == 0.0
    assert derived["pipelined"] == round(sorted(errors["pipelined"])[3], 2)  # 5 points: p75 is the 4th
    assert derived["ring"] == 0.0
    assert derived["tile_fused"] == DEFAULT_MAX_ERROR
    low, high = sorted(errors["host_staged"])[2:4]
    assert derived["host_staged"] == round(low + 0.25 * (high - low), 2)
    assert derived["copy_engine"] == DEFAULT_REL_ERROR["copy_engine"]  # no points: the constant is kept
    assert du.derive_constants({"ring": errors["ring"]}, 100)["ring"] == 0.0


def _planted_run(rng, site, planted: dict, *, cluster="h200x2", e_range=(-0.05, 0.25)):
    """Results lines of one run of ``site`` whose plans ran (1 + e + per-piece allowance) times slower,
    relative to sequential, than the model predicts; ``planted[class]`` gets each e."""
    cluster_spec, view = load_preset(cluster), calibration_view(None)
    base = baselines(rng)
    predicted_seq = predict(site, SEQ, cluster_spec, view).total_ms
    lines = [record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base, cluster=cluster)]
    for cls, plan in BY_CLASS.items():
        e = rng.uniform(*e_range)
        ratio = predict(site, plan, cluster_spec, view).total_ms / predicted_seq
        slower = 1 + e + DEFAULT_PER_PIECE_ERROR * (plan_pieces(plan) - 1)
        lines.append(record(site=site, plan=plan, median_ms=base.sequential_ms * ratio * slower, base=base,
                            cluster=cluster))
        planted.setdefault(cls, []).append(e)
    return lines


def _calibration_sites(rng, count: int) -> list[Site]:
    sites = []
    while len(sites) < count:
        site = Site(kind=rng.choice(["ag_mm", "mm_rs"]), m=1024 * rng.randint(2, 8), k=1024 * rng.randint(2, 8),
                    n=1024 * rng.randint(2, 8), dtype="bfloat16", world=2)
        if not vs.held_out_site(site.key, 3) and site not in sites:
            sites.append(site)
    return sites


def test_class_errors_recover_the_planted_errors_and_note_unpriced_plans():
    rng = random.Random(32)
    planted: dict[str, list[float]] = {}
    lines = [r for site in _calibration_sites(rng, 3) for r in _planted_run(rng, site, planted)]
    staged_site = _calibration_sites(rng, 1)[0]
    base = baselines(rng)
    lines += [record(site=staged_site, plan=p, median_ms=base.sequential_ms, base=base, cluster="h200-host-staged")
              for p in (SEQ, BY_CLASS["ring"])]  # p2p is not offered through host memory: not priced
    groups, _ = vs.group_sites(lines, None)
    errors, uncalibrated, notes = du.class_errors(groups, [], per_piece_error=DEFAULT_PER_PIECE_ERROR)
    for cls, values in planted.items():
        assert sorted(errors[cls]) == pytest.approx(sorted(values), abs=1e-9)
    assert errors["copy_engine"] == [] and errors["host_staged"] == [] and uncalibrated == {}
    assert any(staged_site.key in note and "not priced" in note for note in notes)


def test_main_derives_from_calibration_sites_only(tmp_path, capsys):
    rng = random.Random(33)
    planted: dict[str, list[float]] = {}
    lines = [r for site in _calibration_sites(rng, 5) for r in _planted_run(rng, site, planted)]
    frozen = vs.HELD_OUT_SITES[2].split(":")  # a held-out site whose plans ran far slower than predicted
    m, k, n = (int(x) for x in frozen[1].split("x"))
    held = Site(kind=frozen[0], m=m, k=k, n=n, dtype=frozen[2], world=2)
    assert held.key == vs.HELD_OUT_SITES[2]
    ignored: dict[str, list[float]] = {}
    for _ in range(3):
        lines += _planted_run(rng, held, ignored, e_range=(0.26, 0.29))  # would move every p75
    path = write(tmp_path / "lines.jsonl", lines)
    assert hocket_main(["validate", "--allowances", str(path)]) == 0
    out = capsys.readouterr().out
    assert "calibration site runs: 5 (held-out runs left unread: 3)" in out
    derived = dict(re.findall(r'"(\w+)": ([0-9.]+)', out.split("DEFAULT_REL_ERROR = ")[1].splitlines()[0]))
    for cls, values in planted.items():  # 5 points per class: the 75th percentile is the 4th smallest
        expected = round(min(max(sorted(values)[3], 0.0), DEFAULT_MAX_ERROR), 2)
        assert float(derived[cls]) == pytest.approx(expected), cls
    assert float(derived["copy_engine"]) == DEFAULT_REL_ERROR["copy_engine"]
    assert re.search(r"copy_engine\s+0 .*\(no points: kept\)", out)


def _relay_profile(tmp_path, *, relay: bool):
    from hocket.hardware.profile import CalibrationProfile, ContentionPoint, CurvePoint, save_profile

    point = (CurvePoint(bytes=1 << 20, ms=0.05),)
    profile = CalibrationProfile(fingerprint="toy", host_link=point, host_relay=point if relay else (),
                                 contention={"host_link": ContentionPoint(gemm_slowdown=1.05, transfer_slowdown=1.1)})
    return save_profile(profile, path=tmp_path / ("relay.json" if relay else "no_relay.json"))


def _relay_lines(rng, sites):
    staged = Plan(strategy="chunked", chunks=4, transport="host_staged", order="local_first")
    lines = []
    for site in sites:
        base = baselines(rng)
        lines += [record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base, cluster="h200-host-staged"),
                  record(site=site, plan=staged, median_ms=base.sequential_ms * rng.uniform(0.6, 0.9), base=base,
                         cluster="h200-host-staged")]
    return lines


def test_relay_points_of_a_profile_without_the_relay_curve_are_kept_apart(tmp_path):
    from hocket.hardware.profile import load_profile

    rng = random.Random(34)
    groups, _ = vs.group_sites(_relay_lines(rng, _calibration_sites(rng, 3)), None)
    for relay, measured, apart in ((True, 3, 0), (False, 0, 3)):
        profile = load_profile(_relay_profile(tmp_path, relay=relay), expected=None)
        errors, uncalibrated, _ = du.class_errors(groups, [profile], per_piece_error=DEFAULT_PER_PIECE_ERROR)
        assert len(errors["host_staged"]) == measured
        assert len(uncalibrated.get("host_staged", [])) == apart


def test_lease_profiles_price_each_file_with_the_profile_of_its_lease(tmp_path, capsys):
    rng = random.Random(35)
    sites = _calibration_sites(rng, 4)
    runs = tmp_path / "h200x2"  # folders of today's relay (hocket.validate.lines.CURRENT_RELAY_RUNS)
    leased = write(runs / "run41" / "bench_multigpu_host_staged.jsonl", _relay_lines(rng, sites[:2]))
    (runs / "run41" / "profile_host.json").write_text(_relay_profile(tmp_path, relay=False).read_text())
    bare = write(runs / "run42" / "bench_multigpu_host_staged.jsonl", _relay_lines(rng, sites[2:]))
    assert vl.lease_profile_path(leased) == runs / "run41" / "profile_host.json"
    assert vl.lease_profile_path(bare) is None
    assert hocket_main(["validate", "--allowances", str(leased), str(bare), "--lease-profiles"]) == 0
    out = capsys.readouterr().out
    assert "each lease its own where it left one" in out
    # run41's lease profile has no relay curve: its 2 plans count apart; run42 has none (presets): measured
    assert re.search(r"^host_staged\s+2 ", out, re.M)
    tail = out.split("did not measure their class")[1]
    assert re.search(r"^host_staged\s+2 ", tail, re.M)
    # without the flag neither file has a profile: all 4 plans count
    assert hocket_main(["validate", "--allowances", str(leased), str(bare)]) == 0
    assert re.search(r"^host_staged\s+4 ", capsys.readouterr().out, re.M)


def test_lease_profile_path_reads_the_phase_of_the_file(tmp_path):
    (tmp_path / "profile.json").write_text("{}")
    assert vl.lease_profile_path(tmp_path / "bench_multigpu_nvlink.jsonl") == tmp_path / "profile.json"
    assert vl.lease_profile_path(tmp_path / "bench_multigpu_host_staged.jsonl") is None  # profile_host.json missing
    (tmp_path / "profile_host.json").write_text("{}")
    assert vl.lease_profile_path(tmp_path / "bench_multigpu_host_staged.jsonl") == tmp_path / "profile_host.json"
