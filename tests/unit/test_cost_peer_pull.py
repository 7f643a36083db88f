"""chunked over copy_engine with the pull protocol (``Plan.protocol``, the automatic choice where put does not
exist) is priced as
hocket.ops.lowering.peer_pull runs it: the own shard staged into this rank's slot, one barrier,
then one DMA pull per peer piece, each peer piece's GEMM after its pull; mm_rs in one piece:
the peers' partials, the barrier, the pulls beside the own block's GEMM, the sum."""

import random

import pytest

from hocket.core.peer_protocol import available, peer_protocol_for, plan_protocol, protocols_for
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.hardware import load_preset
from hocket.strategies import pipeline_stages

H200X2 = load_preset("h200x2")
H200X8 = load_preset("h200x8")


def _timeline(site, plan, cluster):
    stages = pipeline_stages(site, plan, cluster)
    timeline = schedule(stages)
    return stages, {s.name: (a, e) for s, a, e in zip(stages, timeline.start_ms, timeline.end_ms)}


@pytest.mark.parametrize("world", [2, 8])
def test_gather_pulls_every_peer_piece_after_one_barrier(world):
    rng = random.Random()
    site = Site(kind="ag_mm", m=world * rng.randint(8, 32) * 128, k=rng.choice([2048, 8192]),
                n=rng.choice([2048, 8192]), world=world)
    chunks = rng.randint(1, 4)
    stages, at = _timeline(site, Plan(strategy="chunked", chunks=chunks, transport="copy_engine", protocol="pull"),
                           H200X2 if world == 2 else H200X8)
    pulls = [s for s in stages if s.op == "pull"]
    assert len(pulls) == (world - 1) * chunks and all(s.resource == "copy_engine" for s in pulls)
    assert sum(s.nbytes for s in pulls) == pytest.approx((world - 1) * site.comm_bytes / world)
    assert not any(s.op in ("push", "all_gather") for s in stages)
    barrier = at["pull.barrier"]
    assert barrier[0] >= at["pull.stage"][1] - 1e-12, "the shard is in the slot before the barrier"
    assert all(at[s.name][0] >= barrier[1] - 1e-12 for s in pulls)
    assert at["gemm_own"][0] < min(at[s.name][1] for s in pulls), "the own shard is multiplied beside the pulls"
    for j in range(world - 1):
        for i in range(chunks):
            assert at[f"gemm[{j}.{i}]"][0] >= at[f"pull[{j}.{i}]"][1] - 1e-12


def test_one_piece_scatter_pulls_beside_the_own_block():
    site = Site(kind="mm_rs", m=8192, k=random.choice([2048, 14336]), n=8192, world=2)
    stages, at = _timeline(site, Plan(strategy="chunked", chunks=1, transport="copy_engine"), H200X2)
    assert at["pull.barrier"][0] >= at["gemm_peers"][1] - 1e-12, "partials are ready before the barrier"
    assert at["pull[0]"][0] >= at["pull.barrier"][1] - 1e-12
    assert at["gemm_own"][0] < at["pull[0]"][1], "the own block is multiplied beside the pull"
    assert at["reduce[final]"][0] >= max(at["gemm_own"][1], at["pull[0]"][1]) - 1e-12
    assert not any(s.op == "push" for s in stages)


def test_the_pull_protocol_issues_less_host_work_than_the_push_pipe():
    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2)
    plan = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    host = {}
    for protocol in ("push", "pull"):
        host[protocol] = sum(s.duration_ms for s in pipeline_stages(site, plan.with_(protocol=protocol), H200X2)
                             if s.is_issue)
    assert host["pull"] < host["push"]


def test_protocol_choice():
    assert peer_protocol_for("ag_mm", 1) == "put" and peer_protocol_for("ag_mm", 4) == "pull"
    assert peer_protocol_for("mm_rs", 1) == "pull"
    assert peer_protocol_for("mm_rs", 2) == "push" and peer_protocol_for("mm_ar", 1) == "push"
    assert not available("pull", "mm_ar", 1) and not available("put", "mm_rs", 1) and available("push", "mm_ar", 3)
    assert protocols_for("ag_mm", 1) == ("put", "pull", "push") and protocols_for("mm_rs", 2) == ("push",)
    assert peer_protocol_for("ag_mm", 1, "push") == "push" and peer_protocol_for("ag_mm", 1, "put") == "put"
    with pytest.raises(ValueError, match="'put' does not exist for ag_mm with chunks=2"):
        peer_protocol_for("ag_mm", 2, "put")
    with pytest.raises(ValueError, match="kind='h2d_mm'"):
        peer_protocol_for("h2d_mm", 1)
    plan = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    assert plan_protocol("mm_rs", plan) == "pull" and plan_protocol("mm_rs", plan.with_(protocol="push")) == "push"


def test_a_protocol_the_call_lacks_is_refused_by_the_cost_model():
    site = Site(kind="mm_ar", m=4096, k=4096, n=4096, world=2)
    with pytest.raises(ValueError, match="'pull' does not exist for mm_ar"):
        pipeline_stages(site, Plan(strategy="chunked", chunks=2, transport="copy_engine", protocol="pull"), H200X2)


def test_put_copies_before_the_barrier_and_multiplies_the_peers_after_it():
    site = Site(kind="ag_mm", m=8192, k=random.choice([4096, 8192]), n=7168, world=2)
    stages, at = _timeline(site, Plan(strategy="chunked", chunks=1, transport="copy_engine", protocol="put"), H200X2)
    assert not any(s.op == "pull" for s in stages) and "pull.stage" not in at, "no staging copy"
    assert at["pull.barrier"][0] >= at["put[0]"][1] - 1e-12
    assert at["gemm_peers"][0] >= at["pull.barrier"][1] - 1e-12
    assert at["gemm_own"][0] < at["put[0]"][1], "the own shard is multiplied beside the put"


@pytest.mark.parametrize("world", [2, 8])
def test_one_piece_scatter_adds_the_fused_rows_in_the_gemm_epilogue(world):
    """The fused rows' partials are pulled first and their GEMM starts after them; only the plain rows
    (and, on more ranks, the other sources' fused rows) are summed in passes; the cut is the one
    :func:`hocket.strategies.pieces.own_block_split` gives the executor."""
    from hocket.cost.builder import new_builder
    from hocket.strategies.peer_pipelines import own_block_split
    from hocket.strategies.pieces import own_block_split as shared_split

    site = Site(kind="mm_rs", m=world * 4096, k=14336, n=8192, world=world)
    cluster = H200X2 if world == 2 else H200X8
    stages, at = _timeline(site, Plan(strategy="chunked", chunks=1, transport="copy_engine"), cluster)
    by_name = {s.name: s for s in stages}
    rows = site.m // world
    row_bytes = site.n * site.itemsize
    fused = by_name["gemm_own_fused"].flops / (2.0 * site.k * site.n)
    plain = rows - fused
    assert 0 < fused < rows and plain % 128 == 0
    b = new_builder(site, Plan(strategy="chunked", chunks=1, transport="copy_engine"), cluster)
    assert own_block_split(b, rows) == (plain, fused)
    assert shared_split(rows, site.k, site.n, sources=world - 1, itemsize=site.itemsize, tflops=b.device.peak(site.dtype),
                        gbps=b.topo.ring_gbps, sms=b.device.sm_count) == (plain, fused)
    assert by_name["gemm_own"].flops == pytest.approx(2.0 * plain * site.k * site.n)
    assert sum(by_name[f"pull_fused[{j}]"].nbytes for j in range(world - 1)) == pytest.approx(
        (world - 1) * fused * row_bytes)
    assert at["gemm_own_fused"][0] >= max(at["gemm_own"][1], *(at[f"pull_fused[{j}]"][1]
                                                               for j in range(world - 1))) - 1e-12
    assert by_name["reduce[final]"].nbytes == pytest.approx(3.0 * (world - 1) * plain * row_bytes)
    assert ("reduce[fused]" in by_name) == (world > 2)
    assert at["reduce[final]"][0] >= at["gemm_own_fused"][1] - 1e-12
