"""Planner regret on synthetic results: prediction-alone and autotuned choices, margins, skips."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.regret import group_records, planner_regret, site_regret

record_mod = pytest.importorskip("hocket.bench.record")
stats = pytest.importorskip("hocket.timing.stats")

SEQ = Plan()
CH2 = Plan(strategy="chunked", chunks=2)
CH4 = Plan(strategy="chunked", chunks=4)
RING = Plan(strategy="ring", chunks=1, transport="p2p")


def _record(site: Site, plan: Plan, ms: float, hw: str = "hw1"):
    return record_mod.BenchRecord(
        site=site, plan=plan, timing=stats.Summary(median_ms=ms, p10_ms=ms * 0.95, p90_ms=ms * 1.05, n=9),
        baselines=record_mod.Baselines(sequential_ms=10.0, compute_alone_ms=6.0, comm_alone_ms=5.0),
        hardware={"hash": hw}, environment={}, versions={}, git_hash=None, command="test")


def _site() -> Site:
    return Site(kind="ag_mm", m=64 * random.randint(1, 64), k=256, n=256, world=2)


def test_prediction_alone_and_autotuned_regret_hand_computed():
    site = _site()
    measured = {SEQ: 10.0, CH2: 8.0, CH4: 6.0, RING: 9.0}
    predicted = {SEQ: 10.0, CH2: 5.0, CH4: 7.0, RING: 6.0}  # the model prefers chunked(2): wrong
    row = site_regret([_record(site, p, ms) for p, ms in measured.items()], lambda s, p: predicted[p], top_k=2)
    assert row.best_plan == CH4 and row.best_ms == 6.0
    assert row.predicted_plan == CH2 and row.predicted_regret == pytest.approx(8.0 / 6.0)
    assert row.predicted_vs_sequential == pytest.approx(0.8)
    # top-2 predicted = chunked(2), ring; measured best among them and sequential: chunked(2)
    assert row.tuned_plan == CH2 and row.tuned_regret == pytest.approx(8.0 / 6.0)
    wider = site_regret([_record(site, p, ms) for p, ms in measured.items()], lambda s, p: predicted[p], top_k=3)
    assert wider.tuned_plan == CH4 and wider.tuned_regret == 1.0
    assert row.noise == pytest.approx(0.1)


def test_margin_keeps_sequential_when_the_gain_is_small():
    site = _site()
    records = [_record(site, SEQ, 10.0), _record(site, CH2, 9.9)]
    row = site_regret(records, lambda s, p: {SEQ: 10.0, CH2: 9.8}[p])
    assert row.predicted_plan == SEQ and row.tuned_plan == SEQ
    assert row.predicted_vs_sequential == 1.0 and row.predicted_regret == pytest.approx(10.0 / 9.9)


def test_unpriceable_plans_are_left_out_with_a_note():
    site = _site()

    def cost(s, p):
        if p == RING:
            raise ValueError("ring is not priced here")
        return {SEQ: 3.0, CH2: 2.0}[p]

    row = site_regret([_record(site, SEQ, 3.0), _record(site, CH2, 2.5), _record(site, RING, 1.0)], cost)
    assert row.measured == 2 and row.best_plan == CH2
    assert row.unpriced and "ring is not priced" in row.unpriced[0]


def test_groups_by_site_and_hardware_and_skips_with_notes():
    a, b = _site(), Site(kind="mm_rs", m=128, k=64, n=64, world=2)
    records = [_record(a, SEQ, 2.0), _record(a, CH2, 1.0), _record(a, SEQ, 4.0, hw="hw2"),
               _record(a, CH2, 3.0, hw="hw2"), _record(b, CH2, 1.0)]
    assert len(group_records(records)) == 3
    rows, notes = planner_regret(records, lambda r: None if r.hardware["hash"] == "hw2" else
                                 (lambda s, p: {SEQ: 2.0, CH2: 1.0}[p]))
    assert [(r.site, r.hardware_hash) for r in rows] == [(a, "hw1")]
    assert any("no cluster description" in n for n in notes)
    assert any("no measured sequential" in n for n in notes)
    assert rows[0].to_dict()["predicted_plan"] == CH2.to_dict()


def test_autotuned_column_times_the_tuning_shortlist_not_a_plain_top_k():
    site = _site()
    ch8 = Plan(strategy="chunked", chunks=8)
    ring2 = Plan(strategy="ring", chunks=2, transport="p2p")
    scale = random.uniform(0.5, 2.0)
    measured = {SEQ: 10.0, ch8: 9.0, CH4: 6.0, RING: 8.0, ring2: 8.5}
    predicted = {SEQ: 10.0, ch8: 5.0, RING: 5.5, ring2: 5.7, CH4: 7.0}  # chunked(4) ranks last of the four
    records = [_record(site, p, ms * scale) for p, ms in measured.items()]
    row = site_regret(records, lambda s, p: predicted[p] * scale, top_k=2)
    # a plain top-2 (chunked(8), ring(1)) would pick ring(1) at 8.0; the shortlist times chunked(8)
    # and its half-pieces twin chunked(4), which measures best
    assert row.tuned_plan == CH4 and row.tuned_regret == pytest.approx(1.0)
    assert row.predicted_plan == ch8 and row.predicted_regret == pytest.approx(9.0 / 6.0)
    from hocket.plan.search import tuning_shortlist

    assert tuning_shortlist([ch8, RING, ring2, CH4], baseline=SEQ, k=2) == (ch8, CH4)


def test_runs_of_one_machine_are_scored_apart_with_run_of():
    """Pooled, the newest line per plan wins across runs: a fast chunked(2) of one run hides that the
    other run's chunked(2) lost. With ``run_of`` each run is its own row and keeps its own label."""
    site = _site()
    first = [_record(site, SEQ, 10.0), _record(site, CH2, 12.0), _record(site, CH4, 9.0)]
    second = [_record(site, SEQ, 10.5), _record(site, CH2, 8.0)]
    run = {id(r): "a" for r in first} | {id(r): "b" for r in second}
    cost = lambda s, p: {SEQ: 10.0, CH2: 7.0, CH4: 9.5}[p]  # noqa: E731  the model prefers chunked(2) in both runs
    pooled, _ = planner_regret(first + second, lambda r: cost)
    assert len(pooled) == 1 and pooled[0].run == "" and pooled[0].predicted_regret == 1.0  # 8.0 is the best
    apart, _ = planner_regret(first + second, lambda r: cost, run_of=lambda r: run[id(r)])
    by_run = {row.run: row for row in apart}
    assert set(by_run) == {"a", "b"}
    assert by_run["a"].predicted_plan == CH2 and by_run["a"].predicted_regret == pytest.approx(12.0 / 9.0)
    assert by_run["a"].predicted_vs_sequential == pytest.approx(1.2)
    assert by_run["b"].predicted_regret == 1.0 and by_run["b"].measured == 2
    assert by_run["a"].to_dict()["run"] == "a"
    assert len(group_records(first + second, run_of=lambda r: run[id(r)])) == 2


def _fingerprint(*, transports=("collective", "p2p"), env=None, devices=2, driver="580.1") -> dict:
    """A fingerprint dict as ``hocket.hardware.fingerprint`` writes it (its ``hash`` differs on any change)."""
    env = dict(env or {})
    body = {"devices": {"H200 SXM": devices}, "env": env, "nodes": 1, "world_size": devices,
            "versions": {"driver": driver, "torch": "2.11.0"},
            "topology": [{"nodes": 1, "islands": [{"count": devices, "link": "nvlink", "model": "H200 SXM",
                                                   "transports": list(transports)}]}]}
    return {**body, "hash": str(abs(hash(repr(sorted(body.items(), key=str)))))}


def _line(site: Site, plan: Plan, ms: float, hardware: dict):
    return record_mod.BenchRecord(
        site=site, plan=plan, timing=stats.Summary(median_ms=ms, p10_ms=ms * 0.95, p90_ms=ms * 1.05, n=9),
        baselines=record_mod.Baselines(sequential_ms=10.0, compute_alone_ms=6.0, comm_alone_ms=5.0),
        hardware=hardware, environment={}, versions={}, git_hash=None, command="test")


def test_a_machine_is_its_hardware_not_hockets_transport_list_or_the_process_env():
    from hocket.plan.regret import machine_key

    site = _site()
    old = _fingerprint(env={"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "1", "NCCL_NVLS_ENABLE": "0"})
    new = _fingerprint(transports=("collective", "p2p", "peer_read"), env={"NCCL_NVLS_ENABLE": "0"})
    assert old["hash"] != new["hash"]
    assert machine_key(_line(site, SEQ, 1.0, old)) == machine_key(_line(site, SEQ, 1.0, new))
    # what changes the machine or its links does change the key
    for other in (_fingerprint(env={"NCCL_NVLS_ENABLE": "0", "NCCL_P2P_DISABLE": "1"}), _fingerprint(devices=4),
                  _fingerprint(driver="590.2", env={"NCCL_NVLS_ENABLE": "0"})):
        assert machine_key(_line(site, SEQ, 1.0, other)) != machine_key(_line(site, SEQ, 1.0, new))
    assert machine_key(_line(site, SEQ, 1.0, {"hash": "h"})) == "h"  # no fingerprint body: its hash
    # lines of one machine under two fingerprint hashes form one group, the newest line per plan winning
    groups = group_records([_line(site, SEQ, 10.0, old), _line(site, CH2, 9.0, old),
                            _line(site, CH2, 7.0, new)])
    (lines,) = groups.values()
    assert sorted(r.timing.median_ms for r in lines) == [7.0, 10.0]
