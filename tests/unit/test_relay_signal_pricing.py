"""The relay's issue costs in the cost model, and the signalling mode of hocket.validate's results lines (each
line is priced with the mode it ran)."""

from __future__ import annotations

import random

import pytest
from _results_lines import baselines, record

import hocket.validate.lines as vc
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost.issue import DEFAULT_ISSUE_US
from hocket.hardware import load_preset
from hocket.strategies import predict

SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2, dtype="bf16")
CLUSTER = load_preset("h200-host-staged")


@pytest.mark.parametrize("order", ["natural", "local_first"])
def test_the_relay_issue_costs_are_paid_per_call_and_message(order):
    """A profile's measured relay costs move the host's issue time: a call per piece in the natural order,
    one call for every piece own data first; every piece's messages either way (8 pieces of a 32 MiB
    shard: at least 8 messages)."""
    plan = Plan(strategy="chunked", chunks=8, order=order, transport="host_staged")

    def issue_ms(raised) -> float:
        table = dict(DEFAULT_ISSUE_US)
        for key in raised:
            table[key] += 100.0
        return predict(SITE, plan, CLUSTER, _issue_view(table), steady_state=True).busy_ms["issue"]

    base = issue_ms(())
    if order == "natural":
        assert issue_ms(("relay_call",)) >= base + 8 * 0.1 * 0.99  # a relay call per piece, paid in a loop
    else:
        assert issue_ms(("relay_call",)) == pytest.approx(base + 0.1)  # one call for all pieces
    assert issue_ms(("relay_message",)) >= base + 7 * 0.1 * 0.99


def _issue_view(table):
    from hocket.cost.calibration import CalibrationView
    from hocket.hardware.profile import CalibrationProfile

    profile = CalibrationProfile(fingerprint="test", world_size=2, gemm=(), collectives={}, p2p=(), copy_engine=(),
                                 host_link=(), contention={}, issue_us=table)
    return CalibrationView(profile)


@pytest.mark.parametrize("folder,method,expected", [
    ("h200x2/run16/", "chunked(4)/host_staged", "host"),
    ("h200x2/run22/", "chunked(4)/host_staged", "device"),
    ("h200x2/run22/", "chunked(4)/host_staged @8MB,thread=0,signal=host", "host"),
    ("h200x2/run27/", "planner", "device"),
])
def test_older_relay_lines_get_the_signal_of_their_run(folder, method, expected, tmp_path):
    rng = random.Random(7)
    line = record(site=SITE, plan=Plan(strategy="chunked", chunks=4, transport="host_staged"), median_ms=1.2,
                  base=baselines(rng), cluster="h200-host-staged", run={"method": method})
    vc._fill_signal(line, tmp_path / folder / "bench.jsonl")
    assert vc.line_signal(line) == expected
    written = record(site=SITE, plan=line.plan, median_ms=1.2, base=baselines(rng), cluster="h200-host-staged",
                     run={"method": method, "host_stage_signal": "host"})
    vc._fill_signal(written, tmp_path / "h200x2/run30/bench.jsonl")
    assert vc.line_signal(written) == "host"  # what the line recorded wins
