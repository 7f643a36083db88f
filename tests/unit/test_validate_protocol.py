"""hocket.validate's validation, allowances and regret price each copy-engine line with the peer protocol it ran
(hocket.validate.lines.line_protocol / plan_as_ran, as ``Plan.protocol``): lines written before ``run.peer_protocol``
existed are push, a line that names its protocol is priced with it, and lines of other transports are
priced as before. Synthetic records on the h200x2 preset."""

from __future__ import annotations

import json
import random

import pytest
from _results_lines import baselines, record, write

from hocket.cli.main import main as hocket_main
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.plan.search import predict_cost_fn
from hocket.plan.uncertainty import DEFAULT_PER_PIECE_ERROR, plan_pieces
from hocket.strategies import predict
from hocket.validate import allowances as du
from hocket.validate import cost_model as vc
from hocket.validate import lines as vl
from hocket.validate import regret as pr
from hocket.validate import sites as vs

SEQ = Plan()
PEER_ONE = Plan(strategy="chunked", chunks=1, transport="copy_engine")
"""ag_mm in one piece over copy_engine: push, pull and put all exist and are priced differently."""
NCCL_TWO = Plan(strategy="chunked", chunks=2)


def _site(rng: random.Random, *, calibration: bool = False) -> Site:
    while True:
        site = Site(kind="ag_mm", m=1024 * rng.randint(2, 8), k=1024 * rng.randint(2, 8),
                    n=1024 * rng.randint(2, 8), dtype="bfloat16", world=2)
        if not calibration or not vs.held_out_site(site.key, 3):
            return site


def _priced_under(protocol, site, plan, *, view=None) -> float:
    """predict() of ``plan`` with ``Plan.protocol=protocol`` set by hand where the plan runs a peer protocol
    (the reference hocket.validate must meet)."""
    if plan.strategy == "chunked" and plan.transport == "copy_engine":
        plan = plan.with_(protocol=protocol)
    return predict(site, plan, load_preset("h200x2"), view).total_ms


def _by_protocol(site, plan=PEER_ONE) -> dict[str, float]:
    prices = {p: _priced_under(p, site, plan) for p in ("push", "pull", "put")}
    assert len(set(prices.values())) == 3, f"the test needs a shape where the protocols differ: {prices}"
    return prices


def test_line_protocol_of_old_new_and_other_lines():
    rng = random.Random(51)
    site, base = _site(rng), baselines(rng)

    def line(plan, run=None):
        return record(site=site, plan=plan, median_ms=base.sequential_ms * rng.uniform(0.7, 1.1), base=base, run=run)

    assert vl.line_protocol(line(PEER_ONE)) == "push"  # before run14: push was the only protocol
    assert vl.line_protocol(line(PEER_ONE, {"peer_protocol": None})) == "push"  # bench_multigpu writes None
    assert vl.line_protocol(line(PEER_ONE, {"peer_protocol": "put"})) == "put"
    assert vl.line_protocol(line(PEER_ONE, {"peer_protocol": "pull"})) == "pull"
    assert vl.line_protocol(line(NCCL_TWO)) is None
    assert vl.line_protocol(line(SEQ, {"peer_protocol": None})) is None
    assert vl.line_protocol(line(Plan(strategy="bulk", transport="copy_engine"))) is None
    assert vl.line_label(line(PEER_ONE, {"peer_protocol": "put"})) == PEER_ONE.describe() + " ~put"
    assert vl.line_label(line(PEER_ONE)) == PEER_ONE.describe()
    for bad in ("auto", "ring"):
        with pytest.raises(ValueError, match="run.peer_protocol"):
            vl.line_protocol(line(PEER_ONE, {"peer_protocol": bad}))


def test_evaluate_prices_each_line_with_its_protocol():
    rng = random.Random(52)
    site, base = _site(rng), baselines(rng)
    prices = _by_protocol(site)
    lines = {
        "seq": record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base),
        "old": record(site=site, plan=PEER_ONE, median_ms=base.sequential_ms * rng.uniform(0.7, 0.9), base=base),
        "put": record(site=site, plan=PEER_ONE, median_ms=base.sequential_ms * rng.uniform(0.7, 0.9), base=base,
                      run={"peer_protocol": "put"}),
        "nccl": record(site=site, plan=NCCL_TWO, median_ms=base.sequential_ms * rng.uniform(0.7, 1.1), base=base,
                       run={"peer_protocol": None}),
    }
    groups, notes = vs.group_sites(list(lines.values()), None)
    assert len(groups) == 1 and not notes
    result = vc.evaluate(groups, None)
    points = {(p["plan"], p["measured_ms"]): p for p in result["points"]}
    old = points[(PEER_ONE.describe(), lines["old"].median_ms)]
    assert old["predicted_ms"] == pytest.approx(prices["push"], rel=1e-12) and old["peer_protocol"] == "push"
    assert old["predicted_ms"] != pytest.approx(prices["pull"], rel=1e-6)
    put = points[(PEER_ONE.describe() + " ~put", lines["put"].median_ms)]
    assert put["predicted_ms"] == pytest.approx(prices["put"], rel=1e-12) and put["peer_protocol"] == "put"
    nccl = points[(NCCL_TWO.describe(), lines["nccl"].median_ms)]
    for protocol in ("push", "pull", "put"):  # no peer protocol: the same price whatever the protocol
        assert nccl["predicted_ms"] == pytest.approx(_priced_under(protocol, site, NCCL_TWO), rel=1e-12)
    assert nccl["peer_protocol"] is None
    # the best plan is a line, protocol included: the two copy-engine lines are different choices
    best = result["bests"][0]
    fastest = min(lines.values(), key=lambda r: r.median_ms)
    assert best["measured_best"] == vl.line_label(fastest)
    chosen = min(result["points"], key=lambda p: p["predicted_ms"])
    assert best["predicted_best"] == chosen["plan"]
    assert best["right"] == (chosen["plan"] == vl.line_label(fastest))


def test_run_to_run_pairs_push_lines_old_and_new_but_not_other_protocols():
    rng = random.Random(53)
    site = _site(rng)
    lines = []
    for run in (None, {"peer_protocol": "push"}, {"peer_protocol": "pull"}, {"peer_protocol": "pull"}):
        base = baselines(rng)
        lines.append(record(site=site, plan=PEER_ONE, median_ms=base.sequential_ms * rng.uniform(0.6, 1.0),
                            base=base, run=run))
    groups, _ = vs.group_sites(lines, None)
    assert len(groups) == 4
    noise = vc.run_to_run(groups)
    assert noise["plans"] == 2 and noise["lines"] == 4  # push (old + labelled) and pull, each in two runs
    spreads = sorted(max(a, b) / min(a, b) - 1 for a, b in ((lines[0].median_ms, lines[1].median_ms),
                                                            (lines[2].median_ms, lines[3].median_ms)))
    assert noise["max_spread"] == pytest.approx(spreads[1])
    assert noise["median_spread"] == pytest.approx(sum(spreads) / 2)
    assert vc.implementation(lines[0]) == vc.implementation(lines[1]) != vc.implementation(lines[2])


def test_allowances_price_each_line_with_its_protocol():
    rng = random.Random(54)
    site, base = _site(rng, calibration=True), baselines(rng)
    prices = _by_protocol(site)
    seq_price = _priced_under("push", site, SEQ)
    lines = [record(site=site, plan=SEQ, median_ms=base.sequential_ms, base=base),
             record(site=site, plan=PEER_ONE, median_ms=base.sequential_ms * rng.uniform(0.7, 0.95), base=base),
             record(site=site, plan=PEER_ONE, median_ms=base.sequential_ms * rng.uniform(0.7, 0.95), base=base,
                    run={"peer_protocol": "put"})]
    groups, _ = vs.group_sites(lines, None)
    errors, uncalibrated, notes = du.class_errors(groups, [], per_piece_error=DEFAULT_PER_PIECE_ERROR)
    assert not notes and not uncalibrated
    allowance = DEFAULT_PER_PIECE_ERROR * (plan_pieces(PEER_ONE) - 1)
    expected = [(r.median_ms / base.sequential_ms) / (prices[p] / seq_price) - 1.0 - allowance
                for r, p in ((lines[1], "push"), (lines[2], "put"))]
    assert errors["copy_engine"] == pytest.approx(expected, rel=1e-9)


def test_planner_regret_scores_a_site_with_its_newest_protocol(tmp_path, capsys):
    rng = random.Random(55)
    mixed, pushed = _site(rng), _site(rng)
    prices = _by_protocol(mixed)
    base = baselines(rng)
    old_ms, pull_ms = base.sequential_ms * rng.uniform(0.5, 0.6), base.sequential_ms * rng.uniform(0.8, 0.9)
    lines = [record(site=mixed, plan=SEQ, median_ms=base.sequential_ms, base=base),
             record(site=mixed, plan=PEER_ONE, median_ms=old_ms, base=base),  # push, read first
             record(site=mixed, plan=PEER_ONE, median_ms=pull_ms, base=base, run={"peer_protocol": "pull"})]
    other = baselines(rng)
    lines += [record(site=pushed, plan=SEQ, median_ms=other.sequential_ms, base=other),
              record(site=pushed, plan=PEER_ONE, median_ms=other.sequential_ms * rng.uniform(0.6, 0.9), base=other)]
    kept, protocols, notes = pr.one_protocol_per_site(lines)
    assert protocols == {pr.site_machine(lines[0]): "pull", pr.site_machine(lines[3]): "push"}
    assert kept == [lines[0], lines[2], *lines[3:]]
    assert len(notes) == 1 and mixed.key in notes[0] and "['pull', 'push']" in notes[0] and "1 lines" in notes[0]
    # candidates are priced with the site's protocol
    finder = pr.ClusterFinder("h200x2", None, protocols)
    reference = predict_cost_fn(load_preset("h200x2"))
    assert finder.cost_for(lines[0])(mixed, PEER_ONE) == pytest.approx(prices["pull"], rel=1e-9)
    assert finder.cost_for(lines[3])(pushed, PEER_ONE) == pytest.approx(
        _priced_under("push", pushed, PEER_ONE), rel=1e-9)
    assert finder.cost_for(lines[0])(mixed, SEQ) == pytest.approx(reference(mixed, SEQ), rel=1e-12)
    # end to end: the chosen copy-engine plan's measured time is the pull line's, never the older push one's
    path = write(tmp_path / "lines.jsonl", lines)
    out_json = tmp_path / "rows.json"
    assert hocket_main(["regret", str(path), "--cluster", "h200x2", "--json", str(out_json)]) == 0
    out = capsys.readouterr().out
    assert f"note: {mixed.key} on hardware" in out and "scored with pull" in out
    rows = json.loads(out_json.read_text())
    mine = next(r for r in rows if Site.from_dict(r["site"]).key == mixed.key)
    assert mine["peer_protocol"] == "pull" and mine["measured"] == 2
    assert mine["best_ms"] == pytest.approx(pull_ms)  # pull ran faster than sequential
    assert f"{pr.plan_label(PEER_ONE)} ~pull" in out
    assert old_ms not in (mine["best_ms"], mine["best_ms"] * mine["predicted_regret"])
    assert next(r for r in rows if Site.from_dict(r["site"]).key == pushed.key)["peer_protocol"] == "push"
