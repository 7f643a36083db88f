"""What the agreement descriptor carries of the settings (hocket.ops.dispatch.settings_in_descriptor) and
the error ranks that differ in one get (hocket.ops.agreement); the exchange itself on real ranks is in
tests/dist/test_agreement_settings.py."""

from __future__ import annotations

import json

import pytest

from hocket.core.plan import Plan
from hocket.core.sizes import DEFAULT_SIZES, MIB, TransportSizes, using_sizes
from hocket.ops.agreement import _differences, mode_in_force
from hocket.ops.dispatch import settings_in_descriptor
from hocket.ops.eager_graph import max_graphs, set_max_graphs


@pytest.fixture(autouse=True)
def plain_environment(monkeypatch):
    for name in ("HOCKET_DISABLE", "HOCKET_AGREEMENT", "HOCKET_AUTOTUNE", "HOCKET_HOST_STAGE_DIR",
                 "HOCKET_PROFILE", "HOCKET_EAGER_GRAPHS"):
        monkeypatch.delenv(name, raising=False)


def test_a_collective_plan_carries_the_settings_every_call_reads():
    got = settings_in_descriptor(Plan(strategy="chunked", chunks=2), disabled_now=False, graphs="off")
    assert got == {"HOCKET_DISABLE": False, "HOCKET_AGREEMENT": "1", "HOCKET_EAGER_GRAPHS": "off"}


@pytest.mark.parametrize("transport,sized,staged", [("copy_engine", True, False), ("host_staged", True, True),
                                                    ("p2p", False, False)])
def test_a_transport_carries_the_sizes_and_directory_it_runs_with(monkeypatch, transport, sized, staged):
    monkeypatch.setenv("HOCKET_HOST_STAGE_DIR", "/tmp/stage")
    strategy = "ring" if transport == "p2p" else "chunked"
    small = TransportSizes(piece_bytes=MIB, slots=2)
    with using_sizes(small):
        got = settings_in_descriptor(Plan(strategy=strategy, chunks=2, transport=transport), disabled_now=False,
                                     graphs="off")
    assert got.get("transport_sizes") == (small.to_dict() if sized else None)
    assert got.get("HOCKET_HOST_STAGE_DIR") == ("/tmp/stage" if staged else None)
    assert "HOCKET_AUTOTUNE" not in got  # an explicit plan is not chosen


def test_a_plan_left_to_hocket_carries_autotune_sizes_and_directory(monkeypatch):
    monkeypatch.setenv("HOCKET_AUTOTUNE", "1")
    got = settings_in_descriptor(None, disabled_now=True, graphs="off")
    assert got["HOCKET_AUTOTUNE"] is True and got["HOCKET_DISABLE"] is True
    assert got["transport_sizes"] == DEFAULT_SIZES.to_dict() and got["HOCKET_HOST_STAGE_DIR"] == "/dev/shm"


def test_eager_graphs_carry_the_process_limit():
    previous = set_max_graphs(5)
    try:
        got = settings_in_descriptor(Plan(), disabled_now=False, graphs="auto")
        assert got["HOCKET_EAGER_GRAPHS"] == "auto" and got["eager_graphs_max"] == 5 == max_graphs()
    finally:
        set_max_graphs(previous)
    assert "eager_graphs_max" not in settings_in_descriptor(Plan(), disabled_now=False, graphs="off")


def test_settings_that_change_no_rank_protocol_are_left_out(monkeypatch):
    for name, value in (("HOCKET_TIMEOUT_S", "5"), ("HOCKET_CLUSTER", "h200x2"), ("HOCKET_PROFILE", "/x.json")):
        monkeypatch.setenv(name, value)
    assert settings_in_descriptor(Plan(), disabled_now=False, graphs="off") == {
        "HOCKET_DISABLE": False, "HOCKET_AGREEMENT": "1", "HOCKET_EAGER_GRAPHS": "off"}


def test_a_mode_the_environment_rejects_counts_as_the_default_for_the_exchange(monkeypatch):
    monkeypatch.setenv("HOCKET_AGREEMENT", "sometimes")
    assert mode_in_force() == "1"
    monkeypatch.setenv("HOCKET_AGREEMENT", "0")
    assert mode_in_force() == "0"


def _text(flags: dict) -> str:
    return json.dumps({"op": "matmul_all_reduce", "site": {"m": 4}, "plan": {"strategy": "chunked"}, "flags": flags,
                       "error": ""}, sort_keys=True)


def test_ranks_with_different_settings_get_the_setting_the_values_and_the_fix():
    base = {"direction": "forward", "HOCKET_AGREEMENT": "1", "transport_sizes": DEFAULT_SIZES.to_dict()}
    odd = {**base, "HOCKET_AGREEMENT": "0", "transport_sizes": TransportSizes(slots=8).to_dict()}
    message = _differences([_text(base), _text(odd)], "matmul_all_reduce")
    assert message.startswith("hocket.matmul_all_reduce: ranks run with different settings: ")
    assert "rank 1 has flags.HOCKET_AGREEMENT='0' but rank 0 has flags.HOCKET_AGREEMENT='1'" in message
    assert "'slots': 8" in message and "'slots': 4" in message
    assert "start every rank with the same HOCKET_AGREEMENT" in message
    assert "call hocket.core.sizes.set_sizes with the same TransportSizes on every rank" in message


def test_ranks_with_different_inputs_keep_the_input_message():
    message = _differences([_text({"return_A": True}), _text({"return_A": False})], "all_gather_matmul")
    assert "ranks called it with different inputs" in message and "flags.return_A=False" in message
    assert "To fix" not in message
