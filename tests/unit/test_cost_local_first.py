"""``chunked`` with ``order="local_first"``: the cost model prices what ``peer_chunked`` runs (own
shard multiplied while every piece travels; own block last beside the last transfers; over
``host_staged`` the GEMM launched before the one relay call that moves every piece, whose later
messages are issued while the earlier ones move)."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.hardware import load_preset
from hocket.strategies import pipeline_stages, predict

STAGED = load_preset("h200-host-staged")
RNG = random.Random()


def _shape() -> tuple[int, int, int]:
    return RNG.choice([2048, 4096, 8192]), RNG.choice([2048, 4096, 8192, 12288]), RNG.choice([1536, 4096, 8192])


def _timeline(site, plan, cluster=STAGED):
    stages = pipeline_stages(site, plan, cluster)
    timeline = schedule(stages)
    return {s.name: (start, end, s) for s, start, end in zip(stages, timeline.start_ms, timeline.end_ms)}, timeline


def _one_call_timeline(kind: str, chunks: int):
    """A random shape's own-data-first pipeline of ``chunks`` pieces in one relay call, scheduled."""
    m, k, n = _shape()
    site = Site(kind=kind, m=m, k=k, n=n, world=2)
    plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged", order="local_first")
    return _timeline(site, plan)


@pytest.mark.parametrize("chunks", [1, 3, 8])
def test_ag_mm_one_relay_call_issues_every_piece_before_the_peer_gemms(chunks):
    by_name, timeline = _one_call_timeline("ag_mm", chunks)
    own_start, own_end, _ = by_name["gemm_own"]
    moves = [by_name[f"all_gather[{i}]"] for i in range(chunks)]
    assert own_start < moves[-1][1] and moves[0][0] < own_end  # the own-shard GEMM overlaps the call
    last_issue = max(end for name, (_, end, _) in by_name.items() if name.startswith("issue:all_gather"))
    for i in range(chunks):
        assert by_name[f"issue:gemm[{i}]"][0] >= last_issue - 1e-9  # launched once the whole call is issued
        assert by_name[f"gemm[{i}]"][0] >= moves[i][1] - 1e-9  # after its piece landed
        if i:
            assert moves[i][0] >= moves[i - 1][1] - 1e-9  # the pieces of one call, in order
    assert timeline.total_ms >= moves[-1][1] + by_name[f"gemm[{chunks - 1}]"][2].duration_ms - 1e-9


@pytest.mark.parametrize("chunks", [1, 3, 8])
def test_mm_rs_one_relay_call_sends_each_piece_after_its_gemm_and_sums_once(chunks):
    by_name, timeline = _one_call_timeline("mm_rs", chunks)
    moves = [by_name[f"reduce_scatter[{i}]"] for i in range(chunks)]
    for i in range(chunks):
        assert moves[i][0] >= by_name[f"gemm[{i}]"][1] - 1e-9
    assert by_name["issue:reduce_scatter[0]"][0] >= by_name["issue:gemm_own"][1] - 1e-9  # every GEMM launched first
    own_start, own_end, _ = by_name["gemm_own"]
    assert any(start < own_end and own_start < end for start, end, _ in moves)  # the own block hides a transfer
    sum_start = by_name["sum"][0]
    assert sum_start >= max(own_end, moves[-1][1]) - 1e-9 and "add_own" not in by_name
    assert timeline.total_ms == pytest.approx(by_name["sum"][1])


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_ag_mm_own_shard_runs_beside_the_relay(chunks):
    m, k, n = _shape()
    site = Site(kind="ag_mm", m=m, k=k, n=n, world=2)
    plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged", order="local_first")
    by_name, timeline = _timeline(site, plan)
    own_start, own_end, _ = by_name["gemm_own"]
    first_start, _, _ = by_name["all_gather[0]"]
    last_end = by_name[f"all_gather[{chunks - 1}]"][1]
    assert own_start < last_end and first_start < own_end  # the own-shard GEMM overlaps the transfers
    assert by_name["issue:gemm_own"][1] <= by_name["issue:all_gather[0]"][0]  # launched before the relay call
    # every peer GEMM waits for its piece; nothing ends before the last piece has landed and been used
    for i in range(chunks):
        assert by_name[f"gemm[{i}]"][0] >= by_name[f"all_gather[{i}]"][1] - 1e-9
    assert timeline.total_ms >= last_end + by_name[f"gemm[{chunks - 1}]"][2].duration_ms - 1e-9
    natural = predict(site, plan.with_(order="natural"), STAGED).total_ms
    if chunks == 1:  # one piece: natural order is sequential; local_first hides the own-shard GEMM
        assert predict(site, plan, STAGED).total_ms < natural


def test_relay_messages_after_the_first_do_not_hold_back_the_transfer():
    site = Site(kind="ag_mm", m=8192, k=RNG.choice([8192, 12288]), n=RNG.choice([4096, 7168]), world=2)
    plan = Plan(strategy="chunked", chunks=1, transport="host_staged", order="local_first")
    by_name, _ = _timeline(site, plan)
    transfer_start = by_name["all_gather[0]"][0]
    rest_start, rest_end, rest = by_name["issue_rest:all_gather[0]"]
    assert rest.duration_ms > 0  # many 8 MiB messages: their issue is on the host chain
    assert transfer_start <= rest_start + 1e-9 < rest_end  # ... but after the transfer has started
    assert by_name["issue:gemm[0]"][0] >= rest_end - 1e-9  # the next launch queues behind them


@pytest.mark.parametrize("chunks", [1, 2, 4])
def test_mm_rs_own_block_last_beside_the_last_transfer(chunks):
    m, k, n = _shape()
    site = Site(kind="mm_rs", m=m, k=k, n=n, world=2)
    plan = Plan(strategy="chunked", chunks=chunks, transport="host_staged", order="local_first")
    by_name, timeline = _timeline(site, plan)
    own_start, own_end, _ = by_name["gemm_own"]
    moves = [by_name[f"reduce_scatter[{i}]"] for i in range(chunks)]
    assert any(start < own_end and own_start < end for start, end, _ in moves)  # the own block hides a transfer
    assert moves[-1][1] > own_start  # the last piece is still moving when the own GEMM starts
    # the relay call is issued after the own GEMM is launched
    assert by_name[f"issue:reduce_scatter[{chunks - 1}]"][0] >= by_name["issue:gemm_own"][1] - 1e-9
    add_start = by_name["sum"][0]
    assert add_start >= max(own_end, *(by_name[f"reduce_scatter[{i}]"][1] for i in range(chunks))) - 1e-9
    assert not any(name.startswith("zero") for name in by_name)  # the staging's own block stays zero
    if chunks == 1:  # the own GEMM hides behind the relay
        natural = predict(site, plan.with_(order="natural"), STAGED).total_ms
        assert timeline.total_ms < natural


def test_collective_transport_issues_the_transfers_before_the_own_gemm():
    cluster = load_preset("h200x2")
    m, k, n = _shape()
    site = Site(kind="ag_mm", m=m, k=k, n=n, world=2)
    plan = Plan(strategy="chunked", chunks=2, order="local_first")
    names = [s.name for s in pipeline_stages(site, plan, cluster)]
    assert names.index("all_gather[1]") < names.index("gemm_own") < names.index("gemm[0]")
    copy = Plan(strategy="chunked", chunks=2, order="local_first", transport="copy_engine")
    names = [s.name for s in pipeline_stages(site, copy, cluster)]  # the peer pipe runs there: pulls, no collective
    assert "pull[0.0]" in names and not any(name.startswith("all_gather") for name in names)
