"""The MoE cost model (hocket.cost.moe, hocket.strategies.moe): hand-checkable prices of the expert-parallel sites."""

from __future__ import annotations

import math

import pytest

from hocket.core.moe import MoeSite, parse_skew, routing_counts, skew_class, zipf_counts
from hocket.core.plan import Plan
from hocket.cost import comm
from hocket.cost.builder import group_facts
from hocket.cost.compute import memory_ms
from hocket.cost.moe import (
    CPU_GROUPED,
    GPU_GROUPED,
    GroupedGemmRule,
    a2a_buffer_bytes,
    grouped_gemm_ms,
    pace_rows,
    rank_rows,
)
from hocket.hardware import load_cluster
from hocket.strategies.moe import moe_stages_of, predict_moe

CPU = load_cluster("cpu-host")
H200X2 = load_cluster("h200x2")
H200X8 = load_cluster("h200x8")


def site(**kw) -> MoeSite:
    base = {"kind": "a2a_mm", "tokens": 64, "hidden": 256, "ffn": 128, "experts": 4, "topk": 2, "world": 2,
            "dtype": "float32"}
    base.update(kw)
    return MoeSite(**base)


def a2a_ms(s: MoeSite, cluster, rows: float) -> float:
    topo = group_facts(cluster, s.group_ranks, s.dtype)[0]
    return comm.collective("all_to_all", a2a_buffer_bytes(s, rows), topo).ms


def stage(stages, prefix: str):
    found = [x for x in stages if x.name.startswith(prefix)]
    assert found, f"no stage {prefix!r} in {[x.name for x in stages]}"
    return found


def test_sequential_on_cpu_ranks_is_the_sum_of_its_stages():
    s = site(counts=((40, 30, 30, 28), (10, 20, 30, 68)))
    stages = moe_stages_of(s, Plan(splits="exchanged"), CPU)
    assert math.isclose(predict_moe(s, None, CPU).total_ms, sum(x.duration_ms for x in stages), rel_tol=1e-9)
    names = [x.name for x in stages]
    assert names.index("counts") < names.index("host_sync") < names.index("pack") < names.index("a2a[all]") \
        < names.index("gemm[all]") < names.index("swiglu")


def test_moving_rows_off_rank_adds_exactly_the_all_to_all_transfer_time():
    # one local expert per rank, top-1: the same rows per expert whether they stay or cross. On CPU ranks
    # (no issue chain) exactly; on GPUs within the host's issue time of the call (a few percent here).
    for cluster, t, dtype, tol in ((CPU, 64, "float32", 1e-6), (H200X2, 65536, "bfloat16", 0.05)):
        local = site(experts=2, topk=1, tokens=t, hidden=4096, dtype=dtype, counts=((t, 0), (0, t)))
        remote = site(experts=2, topk=1, tokens=t, hidden=4096, dtype=dtype, counts=((0, t), (t, 0)))
        half = site(experts=2, topk=1, tokens=t, hidden=4096, dtype=dtype, counts=((t // 2, t // 2),) * 2)
        t_local, t_remote, t_half = (predict_moe(x, None, cluster).total_ms for x in (local, remote, half))
        assert math.isclose(t_remote - t_local, a2a_ms(remote, cluster, t) - a2a_ms(local, cluster, 0),
                            rel_tol=tol)
        # doubling the bytes that cross (t/2 -> t rows) moves the price by the transfer's difference
        assert math.isclose(t_remote - t_half, a2a_ms(remote, cluster, t) - a2a_ms(half, cluster, t // 2),
                            rel_tol=tol)
        assert t_remote > t_half > t_local


def test_the_all_to_all_is_priced_at_the_busiest_pair_of_an_uneven_routing():
    s = site(world=2, experts=4, topk=2, tokens=64, counts=((64, 0, 64, 0), (0, 0, 128, 0)))
    rows = rank_rows(s)
    traffic = [[sum(rows[a][b]) for b in range(2)] for a in range(2)]
    assert traffic == [[64, 64], [0, 128]]
    assert pace_rows(traffic) == 64  # rank 0 sends 64, rank 1 receives 64 (rank 1 keeps its 128)
    a2a = stage(moe_stages_of(s, Plan(splits="exchanged"), CPU), "a2a")[0]
    assert math.isclose(a2a.duration_ms, a2a_ms(s, CPU, 64), rel_tol=1e-9)
    assert a2a.nbytes == pytest.approx(64 * s.row_bytes * 2)


def test_a_skewed_routing_prices_the_busiest_ranks_grouped_gemm():
    s = site(counts=((2, 2, 60, 64), (2, 2, 60, 64)))
    assert s.busiest_rank == 1 and s.local_expert_rows(1) == (120, 128)
    gemm = stage(moe_stages_of(s, Plan(splits="exchanged"), CPU), "gemm")[0]
    device = group_facts(CPU, s.group_ranks, s.dtype)[1]
    reorder = 2 * 248 * s.hidden * 4  # the received rows (hidden wide) read and written in expert-major order
    expected = grouped_gemm_ms(device, (120, 128), k=s.hidden, n=2 * s.ffn, dtype=s.dtype, itemsize=4,
                               level_m=248) + memory_ms(device, reorder, launches=0)
    assert math.isclose(gemm.duration_ms, expected, rel_tol=1e-9) and gemm.nbytes == reorder
    assert gemm.flops == 2 * 248 * s.hidden * 2 * s.ffn
    uniform = site()
    assert predict_moe(s, None, CPU).compute_ms > predict_moe(uniform, None, CPU).compute_ms


def test_padded_splits_price_padded_rows_and_no_host_sync():
    s = site(tokens=64, experts=8, topk=2, world=2)  # e_local 4: per pair L = 64 * min(2, 4) = 128 rows
    assert s.padded_rows == 2 * 64 * 2
    stages = moe_stages_of(s, Plan(splits="padded"), CPU)
    names = [x.name for x in stages]
    assert "host_sync" not in names and "counts" in names  # the counts are all-gathered, never synced
    gemm = stage(stages, "gemm")[0]
    real = sum(s.local_expert_rows(s.busiest_rank))
    assert gemm.flops == 2 * real * s.hidden * 2 * s.ffn  # the group offsets skip the padding rows
    assert gemm.nbytes == 2 * s.padded_rows * s.hidden * 4  # the reorder passes over every row
    a2a = stage(stages, "a2a")[0]
    assert math.isclose(a2a.duration_ms, a2a_ms(s, CPU, 128), rel_tol=1e-9)  # one block of L rows to the peer
    pack = stage(stages, "pack")[0]
    assert pack.nbytes == (2 * 64 * 2 + s.padded_rows) * s.row_bytes
    # a skewed router moves fewer rows exchanged than the padded capacity
    skewed = site(tokens=64, experts=8, topk=2, counts=zipf_counts(64, 2, 8, 2, s=1.0))
    assert predict_moe(skewed, Plan(splits="padded"), CPU).comm_ms > 0
    exchanged = moe_stages_of(s, Plan(splits="exchanged"), CPU)
    assert "host_sync" in [x.name for x in exchanged]
    # the combine site reuses the dispatch's split sizes: no exchange priced there
    assert "counts" not in [x.name for x in moe_stages_of(s.pair(), Plan(splits="exchanged"), CPU)]


@pytest.mark.parametrize("cluster", [CPU, H200X2], ids=["cpu", "h200x2"])
@pytest.mark.parametrize("kind", ["a2a_mm", "mm_a2a"])
def test_one_token_block_is_sequential(cluster, kind):
    s = site(kind=kind, tokens=256, counts=zipf_counts(256, 2, 4, 2, s=1.0))
    for splits in ("exchanged", "padded"):
        seq = predict_moe(s, Plan(splits=splits), cluster).total_ms
        one = predict_moe(s, Plan(strategy="token_blocks", chunks=1, splits=splits), cluster).total_ms
        assert math.isclose(one, seq, rel_tol=1e-9)


def test_token_blocks_issue_the_next_blocks_all_to_all_before_this_blocks_gemm():
    s = site(tokens=256)
    stages = moe_stages_of(s, Plan(strategy="token_blocks", chunks=4, splits="exchanged"), CPU)
    names = [x.name for x in stages]
    assert names.index("a2a[block1]") < names.index("gemm[block0]") < names.index("a2a[block2]")
    gemm0 = names.index("gemm[block0]")
    a2a2 = stages[names.index("a2a[block2]")]
    assert gemm0 in a2a2.depends_on  # on CPU ranks the host thread runs the GEMM before it issues block 2
    gemms = stage(stages, "gemm")
    assert sum(g.flops for g in gemms) == 2 * sum(s.local_expert_rows(s.busiest_rank)) * s.hidden * 2 * s.ffn


def test_per_source_computes_its_own_rows_with_no_transfer_and_one_step_per_peer():
    s = site(world=4, experts=8, tokens=64)
    stages = moe_stages_of(s, Plan(strategy="per_source", splits="exchanged"), H200X8)
    names = [x.name for x in stages if not x.is_issue]
    transfers = [x for x in stages if x.is_transfer and x.op == "all_to_all"]
    assert len(transfers) == 3
    assert names.index("a2a[source1]") < names.index("gemm[own]")  # the peers' rounds issued first
    own = stages[[x.name for x in stages].index("gemm[own]")]
    assert not any(stages[d].is_transfer for d in own.depends_on)
    assert names.index("gemm[own]") < min(names.index(f"gemm[source{r}]") for r in (1, 2, 3))


def test_shared_overlap_hides_the_shared_expert_behind_the_all_to_all():
    s = site(tokens=8192, hidden=2048, ffn=1024, shared_ffn=2048, dtype="bfloat16")  # device-bound, not host-bound
    seq = predict_moe(s, None, H200X2)
    over = predict_moe(s, Plan(strategy="shared_overlap", splits="exchanged"), H200X2)
    assert math.isclose(seq.compute_ms, over.compute_ms, rel_tol=1e-9)  # the same work
    assert over.total_ms < seq.total_ms
    stages = moe_stages_of(s, Plan(strategy="shared_overlap", splits="exchanged"), CPU)
    names = [x.name for x in stages]
    assert names.index("a2a[all]") < names.index("shared") < names.index("gemm[all]")
    seq_names = [x.name for x in moe_stages_of(s, Plan(splits="exchanged"), CPU)]
    assert seq_names.index("gemm[all]") < seq_names.index("shared")  # sequential: after the routed experts
    # the combine computes no shared expert: shared_overlap runs there as sequential
    pair = s.pair()
    assert math.isclose(predict_moe(pair, Plan(strategy="shared_overlap", splits="exchanged"), H200X2).total_ms,
                        predict_moe(pair, None, H200X2).total_ms, rel_tol=1e-12)


def test_backward_runs_the_mirrored_flow_with_data_and_weight_gradients():
    s = site(tokens=256)
    fwd = moe_stages_of(s, Plan(splits="exchanged"), CPU)
    bwd = moe_stages_of(MoeSite(**{**s.to_dict(), "direction": "backward", "counts": (), "ranks": ()}),
                        Plan(splits="exchanged"), CPU)
    assert sum(x.flops for x in bwd if x.op.startswith("grouped")) == 2 * sum(x.flops for x in fwd if x.op.startswith("grouped"))
    names = [x.name for x in bwd]
    # a combine: the data gradient, its all-to-all, then the weight gradient in its gap
    assert names.index("gemm[all]") < names.index("a2a[all]") < names.index("wgrad[all]")
    assert "host_sync" not in names and "counts" not in names
    back = MoeSite(**{**s.to_dict(), "direction": "backward", "counts": (), "ranks": ()})
    blocks = moe_stages_of(back, Plan(strategy="token_blocks", chunks=2, splits="exchanged"), CPU)
    bnames = [x.name for x in blocks]
    assert bnames.count("wgrad[all]") == 1 and bnames.index("a2a[block0]") < bnames.index("wgrad[all]") \
        < bnames.index("gemm[block1]")
    # the backward of mm_a2a is a dispatch: each piece's weight gradient right after its data gradient
    mm = moe_stages_of(back.pair(), Plan(strategy="token_blocks", chunks=2, splits="exchanged"), CPU)
    mnames = [x.name for x in mm]
    assert mnames.index("gemm[block0]") < mnames.index("wgrad[block0]") < mnames.index("gemm[block1]")


def test_the_combine_of_block_i_minus_1_is_waited_before_block_i_plus_1_computes():
    s = site(kind="mm_a2a", tokens=256)
    stages = moe_stages_of(s, Plan(strategy="token_blocks", chunks=4, splits="exchanged"), CPU)
    names = [x.name for x in stages]
    gemm2 = stages[names.index("gemm[block2]")]
    assert names.index("a2a[block0]") in gemm2.depends_on
    assert names.index("a2a[block1]") not in gemm2.depends_on
    unpermute = stages[names.index("unpermute")]
    assert all(names.index(f"a2a[block{i}]") in unpermute.depends_on for i in range(4))


def test_expert_groups_issue_every_groups_dispatch_first():
    s = site(tokens=128, experts=8)
    stages = moe_stages_of(s, Plan(strategy="expert_groups", chunks=4, splits="exchanged"), CPU)
    names = [x.name for x in stages]
    assert max(names.index(f"a2a[group{g}]") for g in range(4)) < names.index("gemm[group0]")
    # groups larger than the local experts are cut to one expert each
    assert len(stage(moe_stages_of(s, Plan(strategy="expert_groups", chunks=16, splits="exchanged"), CPU),
                     "gemm")) == s.e_local


def test_a_layer_is_its_two_sites_under_one_plan():
    from hocket.strategies.moe import layer_sites, predict_moe_layer

    s = site(tokens=128, shared_ffn=64)
    first, second = layer_sites(s)
    assert (first.kind, second.kind, second.shared_ffn) == ("a2a_mm", "mm_a2a", 0)
    assert layer_sites(s.pair())[0].kind == "a2a_mm"
    plan = Plan(strategy="token_blocks", chunks=2, splits="exchanged")
    total = predict_moe_layer(s, plan, CPU).total_ms
    assert math.isclose(total, predict_moe(first, plan, CPU).total_ms + predict_moe(second, plan, CPU).total_ms)


def test_the_grouped_gemm_efficiency_falls_with_rows_per_expert():
    for rule in (GPU_GROUPED, CPU_GROUPED):
        effs = [rule.efficiency(t) for t in (1, 8, 64, 512, 4096)]
        assert effs == sorted(effs) and effs[0] < 0.5 * effs[-1] and rule.efficiency(0) == 0.0
        assert math.isclose(rule.efficiency(rule.t_half_rows), rule.e_max / 2)
    device = group_facts(H200X2, (0, 1), "bfloat16")[1]
    dense_rate = []
    for t in (8, 64, 512, 4096):
        groups = (t,) * 8
        ms = grouped_gemm_ms(device, groups, k=4096, n=4096, dtype="bfloat16", itemsize=2)
        dense_rate.append(2 * 8 * t * 4096 * 4096 / ms)
    assert dense_rate == sorted(dense_rate)
    # empty groups cost nothing but the launch; a measured rule replaces the default
    assert grouped_gemm_ms(device, (0, 0), k=64, n=64, dtype="bfloat16", itemsize=2) > 0
    slow = GroupedGemmRule(e_max=0.5, t_half_rows=1024.0, source="test")
    s = site(dtype="bfloat16", tokens=1024)
    assert predict_moe(s, None, H200X2, grouped=slow).compute_ms > predict_moe(s, None, H200X2).compute_ms
    with pytest.raises(ValueError, match="e_max"):
        GroupedGemmRule(e_max=0.0, t_half_rows=1.0)


def test_zero_tokens_and_empty_experts_price_finite_and_positive():
    for s in (site(tokens=0), site(counts=((0, 0, 128, 0), (0, 0, 128, 0))), site(world=1, experts=4)):
        for plan in (None, Plan(splits="padded"), Plan(strategy="expert_groups", chunks=2, splits="exchanged")):
            pred = predict_moe(s, plan, CPU)
            assert math.isfinite(pred.total_ms) and pred.total_ms > 0


def test_the_skew_class_is_computed_from_global_counts_so_every_rank_agrees():
    # each rank's own row is skewed 2x, the global totals are even: class 1 on every rank
    a = site(counts=((32, 32, 32, 32), (32, 32, 32, 32)))
    b = site(counts=((64, 0, 64, 0), (0, 64, 0, 64)))
    assert skew_class(b.routing[0]) == 2 and b.skew_class == a.skew_class == 1 and a.key == b.key
    # the same global counts seen on any rank give one key; a skewed router another class
    z = site(counts=zipf_counts(64, 2, 4, 2, s=2.0))
    assert z.skew_class > 1 and z.key != a.key
    assert parse_skew("zipf:1.5") == ("zipf", 1.5) and routing_counts("uniform", tokens=8, topk=2, experts=4,
                                                                      world=2) == ()
    with pytest.raises(ValueError, match="zipf:S"):
        parse_skew("zipf:-1")


def test_workspace_counts_the_padded_layouts_buffers():
    from hocket.strategies import spec

    s = site(tokens=64, experts=8, topk=2)
    padded = spec("token_blocks").workspace(s, Plan(strategy="token_blocks", chunks=2, splits="padded"))
    exchanged = spec("token_blocks").workspace(s, Plan(strategy="token_blocks", chunks=2, splits="exchanged"))
    assert padded > exchanged > 0
    assert padded >= s.padded_rows * s.hidden * s.itemsize * 2


def test_every_piece_beyond_the_first_costs_the_executors_layout_ops():
    from hocket.cost.compute import launch_ms
    from hocket.cost.moe import PIECE_OPS, SITE_OPS

    s = site(tokens=256)
    device = group_facts(CPU, s.group_ranks, s.dtype)[1]
    for chunks in (2, 4):
        layout = stage(moe_stages_of(s, Plan(strategy="token_blocks", chunks=chunks, splits="exchanged"), CPU),
                       "layout")[0]
        assert math.isclose(layout.duration_ms, (SITE_OPS + (chunks - 1) * PIECE_OPS) * launch_ms(device))
    gpu = moe_stages_of(s, Plan(strategy="token_blocks", chunks=2, splits="exchanged"), H200X2)
    assert any(x.is_issue and x.name == "issue:layout" for x in gpu)  # host time on the issue chain there


@pytest.mark.parametrize("splits", ["exchanged", "padded"])
@pytest.mark.parametrize("plan", [Plan(), Plan(strategy="token_blocks", chunks=3), Plan(strategy="expert_groups", chunks=2),
                                  Plan(strategy="per_source")], ids=lambda p: p.describe())
def test_the_priced_pieces_are_the_executors_split_sizes(plan, splits):
    """Every piece's rows per rank pair equal the all-to-all split sizes ``hocket.ops.moe_exec`` sends."""
    torch = pytest.importorskip("torch")
    from hocket.cost.moe import pieces_of
    from hocket.ops.moe_exec import pieces
    from hocket.ops.moe_layout import MoeLayout

    counts = ((9, 1, 0, 12, 8, 10), (3, 3, 3, 3, 14, 14), (0, 0, 20, 20, 0, 0))
    s = site(world=3, experts=6, topk=2, tokens=20, counts=counts)
    plan = plan.with_(splits=splits)
    priced = pieces_of(s, plan)
    length = s.tokens * min(s.topk, s.e_local)
    table = torch.tensor(s.routing)
    for rank in range(s.world):
        lay = MoeLayout(table, rank=rank, world=s.world, mode=splits, block_rows=length if splits == "padded" else 0,
                        topk=s.topk)
        run = pieces(lay, plan)
        assert len(run) == len(priced)
        for (send, recv, local), mine in zip(run, priced):
            matrix = mine.padded_traffic if splits == "padded" else mine.traffic
            if plan.strategy == "per_source":  # round j: both sides' selections name the pair they move
                assert local == mine.local
            assert list(send.caps) == [matrix[rank][d] for d in range(s.world)]
            assert list(recv.caps) == [matrix[src][rank] for src in range(s.world)]
