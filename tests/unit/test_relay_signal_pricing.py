"""The relay's signalling mode in the cost model and in validate_cost: the device-signal relay
(default) issues less host work per call and message than the host handshake, and each results
line is priced with the mode it ran."""

from __future__ import annotations

import os
import random

import pytest

from hocket.cost import predict
from hocket.cost.issue import DEFAULT_ISSUE_US
from hocket.env import overridden
from hocket.hardware import load_preset
from hocket.core.plan import Plan
from hocket.core.site import Site
from _bench_scripts import baselines, load_script, record

vc = load_script("validate_cost")
SITE = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2, dtype="bf16")
CLUSTER = load_preset("h200-host-staged")


@pytest.mark.parametrize("signal,call,message", [("device", "relay_call", "relay_message"),
                                                 ("host", "relay_call_host", "relay_message_host")])
def test_each_signalling_prices_its_own_relay_issue_costs(signal, call, message):
    """A profile's measured costs of one signalling move only the plans priced under it."""
    plan = Plan(strategy="chunked", chunks=8, order="local_first", transport="host_staged")
    other = {"relay_call", "relay_message", "relay_call_host", "relay_message_host"} - {call, message}

    def issue_ms(raised, calls="piece") -> float:
        table = dict(DEFAULT_ISSUE_US)
        for key in raised:
            table[key] += 100.0
        with overridden({"HOCKET_HOST_STAGE_SIGNAL": signal, "HOCKET_HOST_STAGE_CALLS": calls}):
            return predict(SITE, plan, CLUSTER, _issue_view(table), steady_state=True).busy_ms["issue"]

    base = issue_ms(())
    assert issue_ms(other) == pytest.approx(base)  # the other signalling's costs do not apply
    assert issue_ms((call,)) >= base + 8 * 0.1 * 0.99  # a relay call per piece, paid by the host in a loop
    assert issue_ms((message,)) >= base + 7 * 0.1 * 0.99  # at least one message per call
    # one call for all pieces (the default): the host pays the call once per call of the loop, and
    # every piece's messages are still issued (8 pieces of a 32 MiB shard: at least 8 messages)
    one = issue_ms((), calls="one")
    assert issue_ms((call,), calls="one") == pytest.approx(one + 0.1)
    assert issue_ms((message,), calls="one") >= one + 7 * 0.1 * 0.99
    assert issue_ms(other, calls="one") == pytest.approx(one)


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


def test_priced_as_ran_sets_and_restores_the_signal(monkeypatch):
    monkeypatch.delenv("HOCKET_HOST_STAGE_SIGNAL", raising=False)
    rng = random.Random(3)
    line = record(site=SITE, plan=Plan(transport="host_staged"), median_ms=1.5, base=baselines(rng),
                  cluster="h200-host-staged", run={"host_stage_signal": "host"})
    with vc.priced_as_ran(line):
        assert os.environ["HOCKET_HOST_STAGE_SIGNAL"] == "host"
    assert "HOCKET_HOST_STAGE_SIGNAL" not in os.environ
    nvlink = record(site=SITE, plan=Plan(), median_ms=0.3, base=baselines(rng))
    assert vc.line_signal(nvlink) is None
    with vc.priced_as_ran(nvlink):
        assert "HOCKET_HOST_STAGE_SIGNAL" not in os.environ
