"""bench_multigpu's --host-variants (PIECE_MB[:SLOTS]: relay sizes, as TransportSizes) and --peer-protocols
(copy-engine plans measured again with Plan.protocol set)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import benchmarks.bench_multigpu as bm
from hocket.core.plan import Plan
from hocket.core.sizes import DEFAULT_SIZES, MIB, TransportSizes, using_sizes


def variants(spec: str, link: str = "host_staged"):
    return bm.host_variants(SimpleNamespace(link=link, host_variants=spec, peer_protocols=""))


def test_the_sizes_in_force_come_first_then_each_variant_with_its_sizes():
    got = variants("1024,2,8:8")
    assert got[0] == ("", DEFAULT_SIZES)
    assert got[1] == (" @1024MB", TransportSizes(piece_bytes=1024 * MIB))
    assert got[2] == (" @2MB", TransportSizes(piece_bytes=2 * MIB))
    assert got[3] == (" @8MB,slots=8", TransportSizes(piece_bytes=8 * MIB, slots=8))


def test_variants_start_from_the_sizes_in_force():
    mine = TransportSizes(piece_bytes=4 * MIB, slots=2, mailbox_bytes=64 * MIB)
    with using_sizes(mine):
        got = variants("16")
    assert got[0] == ("", mine)
    assert got[1] == (" @16MB", TransportSizes(piece_bytes=16 * MIB, slots=2, mailbox_bytes=64 * MIB))


def test_nvlink_mode_measures_the_sizes_in_force_only():
    assert variants("1024", link="nvlink") == [("", DEFAULT_SIZES)]


@pytest.mark.parametrize("spec", ["", "x", "8:0:host", ":8", "0", "8:65", "8:0", "8:x", "1.5", "8:device"])
def test_bad_entries_name_the_entry_and_the_form(spec):
    if spec == "":
        assert variants(spec) == [("", DEFAULT_SIZES)]
        return
    with pytest.raises(ValueError, match=r"--host-variants entry .*PIECE_MB\[:SLOTS\]"):
        variants(spec)


def test_bad_entries_are_argument_errors():
    with pytest.raises(SystemExit):
        bm.parse_args(["--link", "host_staged", "--host-variants", "8:0:host"])
    with pytest.raises(SystemExit):
        bm.parse_args(["--peer-protocols", "sideways"])


def protocols(spec: str, plans, kind: str, link: str = "nvlink"):
    return bm.protocol_plans(plans, SimpleNamespace(link=link, host_variants="", peer_protocols=spec), kind)


def test_peer_protocol_variants_are_plans_with_the_protocol_the_call_has():
    one = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    four = Plan(strategy="chunked", chunks=4, transport="copy_engine")
    nccl = Plan(strategy="chunked", chunks=2)
    # ag_mm in one piece runs put; pull and push are the others
    assert protocols("push,pull", [one, nccl], "ag_mm") == [one.with_(protocol="push"), one.with_(protocol="pull")]
    # mm_rs pulls one piece and pushes several: push of one piece only, and nothing for four (push is its own)
    assert protocols("push,pull,put", [one, four], "mm_rs") == [one.with_(protocol="push")]
    assert protocols("pull", [four], "mm_ar") == []  # mm_ar always pushes
    assert protocols("push", [one], "ag_mm", link="host_staged") == []
    assert protocols("", [one], "ag_mm") == []
    with pytest.raises(ValueError, match="--peer-protocols entry 'auto'"):
        protocols("auto", [one], "ag_mm")
