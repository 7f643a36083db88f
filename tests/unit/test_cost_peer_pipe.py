"""chunked over copy_engine with the push protocol (``Plan.protocol="push"``) is priced as
hocket.ops.lowering.peer_chunked runs it: one DMA push per piece straight into each peer's
symmetric region (no mailbox collective), the own rows multiplied beside the pushes (ag_mm) or
last (mm_rs), and the protocol's host work (begin, a flag wait per peer piece, end) on the issue
chain. The pull protocol: tests/unit/test_cost_peer_pull.py."""

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.cost import schedule
from hocket.hardware import load_preset
from hocket.strategies import pipeline_stages, predict

H200X2 = load_preset("h200x2")

H200X8 = load_preset("h200x8")


def _timeline(site, plan, cluster):
    stages = pipeline_stages(site, plan, cluster)
    timeline = schedule(stages)
    return stages, {s.name: (a, e) for s, a, e in zip(stages, timeline.start_ms, timeline.end_ms)}, timeline


def _site(kind: str, world: int, rng: random.Random) -> Site:
    return Site(kind=kind, m=world * rng.randint(8, 32) * 128, k=rng.choice([2048, 4096, 8192]),
                n=rng.choice([2048, 4096, 8192]), world=world)


@pytest.mark.parametrize("world", [2, 8])
def test_gather_pushes_the_own_shard_and_multiplies_it_beside_the_pushes(world):
    rng = random.Random()
    cluster = H200X2 if world == 2 else H200X8
    site = _site("ag_mm", world, rng)
    chunks = rng.randint(1, 4)
    stages, at, _ = _timeline(site, Plan(strategy="chunked", chunks=chunks, transport="copy_engine", protocol="push"), cluster)
    names = [s.name for s in stages if not s.is_issue]
    assert not any(name.startswith("all_gather") for name in names), "no mailbox collective on the peer pipe"
    pushes = [s for s in stages if s.op == "push"]
    assert len(pushes) == (world - 1) * chunks and all(s.resource == "copy_engine" for s in pushes)
    shard_bytes = site.comm_bytes / world
    assert sum(s.nbytes for s in pushes) == pytest.approx((world - 1) * shard_bytes)
    issued = max(at[f"issue:{s.name}"][1] for s in pushes)
    assert at["issue:gemm_own"][0] >= issued - 1e-12, "every push is issued before the own GEMM"
    for j in range(world - 1):
        for i in range(chunks):
            assert at[f"gemm[{j}.{i}]"][0] >= at[f"push[{j}.{i}]"][1] - 1e-12  # after its piece landed


def test_scatter_pushes_each_partial_after_its_gemm_and_sums_last():
    rng = random.Random()
    site = _site("mm_rs", 2, rng)
    stages, at, timeline = _timeline(site, Plan(strategy="chunked", chunks=2, transport="copy_engine", protocol="push"), H200X2)
    for i in range(2):
        assert at[f"push[0.{i}]"][0] >= at[f"gemm[0.{i}]"][1] - 1e-12
    assert at["gemm_own"][0] >= at["gemm[0.1]"][1] - 1e-12, "this rank's own block is computed last"
    assert at["reduce[final]"][0] >= max(at["gemm_own"][1], at["push[0.1]"][1]) - 1e-12
    block_bytes = site.comm_bytes / site.world
    assert sum(s.nbytes for s in stages if s.op == "push") == pytest.approx(block_bytes)


def test_all_reduce_pushes_every_piece_to_every_peer_then_sums():
    site = Site(kind="mm_ar", m=4096, k=4096, n=4096, world=8)
    stages, at, _ = _timeline(site, Plan(strategy="chunked", chunks=2, transport="copy_engine", protocol="push"), H200X8)
    pushes = [s for s in stages if s.op == "push"]
    assert len(pushes) == 7 * 2
    assert at["reduce[final]"][0] >= max(at[s.name][1] for s in pushes) - 1e-12


def test_own_rows_beside_the_push_beat_sequential_when_contention_is_mild():
    # with a copy engine that barely slows the GEMM (2xH200 run9's own contention row: GEMM x1.00), the own
    # shard's GEMM hides the push, as measured there (1.48 ms against sequential's 1.65); the plain
    # chunked pipeline this plan used to be priced as (all-gather, then the GEMM) hid nothing
    from hocket.hardware.profile import CalibrationProfile, ContentionPoint
    mild = CalibrationProfile(fingerprint="x", contention={"copy_engine": ContentionPoint(gemm_slowdown=1.0,
                                                                                         transfer_slowdown=1.5)})
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    plan = Plan(strategy="chunked", chunks=1, transport="copy_engine", protocol="push")
    stages, at, _ = _timeline(site, plan, H200X2)
    assert at["gemm_own"][0] < at["push[0.0]"][1], "the own shard is multiplied while the push runs"
    steady = predict(site, plan, H200X2, mild, steady_state=True).total_ms
    assert steady < predict(site, Plan(), H200X2, mild, steady_state=True).total_ms
    assert steady < predict(site, Plan(strategy="bulk", transport="copy_engine"), H200X2, mild,
                            steady_state=True).total_ms


def test_the_protocol_costs_the_host_more_than_a_sequential_call():
    site = Site(kind="mm_rs", m=8192, k=2048, n=4096, world=2)
    host = {}
    for label, plan in (("sequential", Plan()), ("pipe", Plan(strategy="chunked", chunks=1, transport="copy_engine", protocol="push"))):
        host[label] = sum(s.duration_ms for s in pipeline_stages(site, plan, H200X2) if s.is_issue)
    assert host["pipe"] > host["sequential"]
    names = [s.name for s in pipeline_stages(site, Plan(strategy="chunked", chunks=1, transport="copy_engine", protocol="push"),
                                             H200X2)]
    assert names.index("issue:pipe.begin") < names.index("push[0.0]") and names[-1] == "issue:pipe.end"


@pytest.mark.parametrize("order", ["natural", "local_first"])
def test_tile_fused_consumer_multiplies_its_own_shard_before_any_peer_row_lands(order):
    """hocket.ops.lowering.tile_fused copies this rank's shard in and raises its flags before the kernel
    starts, so its tiles go first whatever the plan's order; only the peers' rows wait for a transfer."""
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, dtype="bfloat16", world=2)
    plan = Plan(strategy="tile_fused", chunks=2, transport="copy_engine", order=order)
    stages = pipeline_stages(site, plan, load_preset("h200x2"))
    t = schedule(stages)
    local = next(i for i, s in enumerate(stages) if s.name == "gemm[local]")
    first_move = next(i for i, s in enumerate(stages) if s.op == "all_gather")
    assert not stages[local].depends_on or all(not stages[d].is_transfer for d in stages[local].depends_on)
    assert t.start_ms[local] < t.end_ms[first_move]  # computing while the first group travels
    moved = sum(s.nbytes for s in stages if s.op == "all_gather")
    assert moved == pytest.approx(site.comm_bytes)  # the peer rows' buffer: (p-1)/p of it moves


def test_tile_fused_producer_pushes_the_peers_blocks_and_keeps_its_own_last():
    site = Site(kind="mm_rs", m=8192, k=14336, n=8192, dtype="bfloat16", world=2)
    plan = Plan(strategy="tile_fused", chunks=2, transport="copy_engine")
    stages = pipeline_stages(site, plan, load_preset("h200x2"))
    t = schedule(stages)
    gemms = [i for i, s in enumerate(stages) if s.name.startswith("gemm[")]
    moves = [i for i, s in enumerate(stages) if s.op == "reduce_scatter"]
    assert len(gemms) == 4 and len(moves) == 2  # two groups per block; only the peer block's groups travel
    assert all(any(d in gemms[:2] for d in stages[m].depends_on) for m in moves)
    assert t.start_ms[moves[-1]] <= t.start_ms[gemms[2]] + 1e-9 < t.end_ms[moves[-1]]  # the own block hides the last push
    assert t.end_ms[moves[0]] > t.start_ms[gemms[1]]  # the first group travels beside the second
    final = next(i for i, s in enumerate(stages) if s.name == "reduce[final]")
    assert t.start_ms[final] >= max(t.end_ms[i] for i in moves + gemms) - 1e-9
    moved = sum(stages[i].nbytes for i in moves)
    assert moved == pytest.approx(site.comm_bytes)  # a buffer whose (p-1)/p, the peer block, travels
