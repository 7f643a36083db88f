"""bench_multigpu's --host-variants parser: PIECE_MB:THREAD[:SIGNAL[:PIPELINE[:SLOTS[:CALLS]]]] (the relay's
signalling mode, what its receives wait for, its slot count and how pipelines call it)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from _bench_scripts import load_script

bm = load_script("bench_multigpu")


def variants(spec: str, link: str = "host_staged"):
    return bm.transport_variants(SimpleNamespace(link=link, host_variants=spec, peer_protocols=""))


def test_the_run_itself_comes_first_then_each_variant_with_its_environment():
    got = variants("8:0:host,1024:0,2:1:device")
    assert got[0] == ("", {})
    assert got[1] == (" @8MB,thread=0,signal=host", {"HOCKET_HOST_STAGE_PIECE_MB": "8",
                                                     "HOCKET_HOST_STAGE_THREAD": "0",
                                                     "HOCKET_HOST_STAGE_SIGNAL": "host"})
    assert got[2] == (" @1024MB,thread=0", {"HOCKET_HOST_STAGE_PIECE_MB": "1024", "HOCKET_HOST_STAGE_THREAD": "0"})
    assert got[3][0] == " @2MB,thread=1,signal=device"


@pytest.mark.parametrize("spec", ["8", "8:2", "8:0:ipc", ":0", "8:0:host:x", "8:0:device:batch:x",
                                  "8:0:device:batch:8:1", "8:0::::all", "8:0:device:batch:8:one:x"])
def test_bad_entries_name_the_entry_and_the_form(spec):
    with pytest.raises(ValueError, match=r"PIECE_MB:THREAD\[:SIGNAL\[:PIPELINE\[:SLOTS\[:CALLS\]\]\]\]"):
        variants(spec)


def test_a_pipeline_variant_sets_the_relay_pipeline_for_its_measurements():
    got = variants("8:0:device:batch,8:0::message")
    assert got[1] == (" @8MB,thread=0,signal=device,pipeline=batch",
                      {"HOCKET_HOST_STAGE_PIECE_MB": "8", "HOCKET_HOST_STAGE_THREAD": "0",
                       "HOCKET_HOST_STAGE_SIGNAL": "device", "HOCKET_HOST_STAGE_PIPELINE": "batch"})
    assert got[2] == (" @8MB,thread=0,pipeline=message", {"HOCKET_HOST_STAGE_PIECE_MB": "8",
                                                          "HOCKET_HOST_STAGE_THREAD": "0",
                                                          "HOCKET_HOST_STAGE_PIPELINE": "message"})


def test_a_slots_variant_sets_the_relay_slot_count():
    got = variants("8:0:::8")
    assert got[1] == (" @8MB,thread=0,slots=8", {"HOCKET_HOST_STAGE_PIECE_MB": "8", "HOCKET_HOST_STAGE_THREAD": "0",
                                                 "HOCKET_HOST_STAGE_SLOTS": "8"})


def test_a_calls_variant_sets_how_pipelines_call_the_relay():
    got = variants("8:0::::piece,8:0::::one")
    assert got[1] == (" @8MB,thread=0,calls=piece", {"HOCKET_HOST_STAGE_PIECE_MB": "8", "HOCKET_HOST_STAGE_THREAD": "0",
                                                     "HOCKET_HOST_STAGE_CALLS": "piece"})
    assert got[2][1]["HOCKET_HOST_STAGE_CALLS"] == "one"
