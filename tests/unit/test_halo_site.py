"""Halo sites: the HaloSite vocabulary, the strategies' registry entries, their stages, the plan space and search,
the whole-grid reference and the finite-difference terms."""

from __future__ import annotations

import pytest
import torch

from hocket.core.halo import HaloSite, halo_problem, neighbour_offsets
from hocket.core.plan import Plan
from hocket.cost.halo import HaloCompute, estimated_compute
from hocket.hardware import load_cluster
from hocket.plan.halo import enumerate_halo_plans, search_halo
from hocket.strategies import spec, strategies_for
from hocket.strategies.halo import halo_stages, predict_halo


def test_a_halo_site_has_its_own_fields_a_stable_key_and_round_trips():
    site = HaloSite(grid=(64, 32), procs=(2, 2), radius=2, dtype="fp64", boundary="periodic", fields=1, carried=2,
                    steps=4)
    assert site.kind == "halo" and site.world == 4 and site.block == (32, 16) and site.dtype == "float64"
    assert HaloSite.from_dict(site.to_dict()) == site
    assert site.key == HaloSite(**{k: v for k, v in site.to_dict().items() if k != "kind"}).key
    assert site.key != HaloSite(grid=(64, 32), procs=(2, 2), radius=1, dtype="fp64", boundary="periodic").key
    assert len(neighbour_offsets(2)) == 8 and len(neighbour_offsets(3)) == 26


@pytest.mark.parametrize(("procs", "boundary", "messages"), [
    ((2,), "fixed", 1), ((2,), "periodic", 2), ((4,), "fixed", 2), ((1,), "periodic", 0),
    ((2, 2), "periodic", 8), ((2, 2), "fixed", 3), ((1, 2), "periodic", 6), ((3, 3), "fixed", 8),
])
def test_the_busiest_rank_sends_one_message_per_neighbour_that_is_not_itself(procs, boundary, messages):
    site = HaloSite(grid=tuple(6 * p for p in procs) + (5,), procs=procs, radius=1, boundary=boundary)
    assert len(site.messages()) == messages
    faces = [o for o in site.messages() if sum(map(abs, o)) == 1]
    for o, nbytes in zip(site.messages(), site.exchange_bytes(1)):
        if o in faces:
            assert nbytes == site.block_points // site.block[[i for i, x in enumerate(o) if x][0]] * 4


@pytest.mark.parametrize(("kwargs", "match"), [
    (dict(grid=(10, 4), procs=(3,), radius=1), "does not divide over 3 ranks"),
    (dict(grid=(8, 4), procs=(2,), radius=0), "radius=0"),
    (dict(grid=(8, 4), procs=(2,), radius=5), "the halo 5 is wider than a rank's block"),
    (dict(grid=(8,), procs=(2, 1), radius=1), "more dims than the grid"),
    (dict(grid=(8, 4), procs=(2,), radius=1, steps=0), "steps=0"),
    (dict(grid=(8, 4), procs=(2,), radius=1, boundary="open"), "boundary='open'"),
])
def test_a_halo_site_refuses_what_cannot_run(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HaloSite(**kwargs)
    assert halo_problem((8, 4), (2,), 2, depth=3) is not None and halo_problem((8, 4), (2,), 2, depth=2) is None


def test_the_registry_holds_the_halo_strategies_and_their_executors():
    import hocket.ops  # noqa: F401  (registers the executors)
    from hocket.ops.executors import executor_for

    assert strategies_for("halo") == ("sequential", "overlap", "deep_halo")
    for name in strategies_for("halo"):
        assert callable(executor_for("halo", name))
    assert "halo" not in spec("chunked").kinds
    with pytest.raises(ValueError, match="HaloSite"):
        from hocket.core.site import Site
        Site(kind="halo", m=1, k=1, n=1)


def _stages(site, plan, compute=None):
    return halo_stages(site, plan, load_cluster("cpu-host"), compute=compute)


def test_overlap_posts_the_exchange_then_the_interior_then_waits_for_the_shell():
    site = HaloSite(grid=(256, 64), procs=(2,), radius=2, steps=2)
    names = [s.name for s in _stages(site, Plan(strategy="overlap", transport="p2p")) if not s.is_issue]
    assert names == ["pack[0]", "halo[0]", "interior[0]", "unpack[0]", "shell[0]",
                     "pack[1]", "halo[1]", "interior[1]", "unpack[1]", "shell[1]"]
    stages = _stages(site, Plan(strategy="overlap", transport="p2p"))
    interior = next(s for s in stages if s.name == "interior[0]")
    halo = next(i for i, s in enumerate(stages) if s.name == "halo[0]")
    assert halo not in interior.depends_on  # the interior runs beside the exchange
    seq = [s.name for s in _stages(site, Plan()) if not s.is_issue]
    assert seq == ["pack[0]", "halo[0]", "unpack[0]", "step[0]", "pack[1]", "halo[1]", "unpack[1]", "step[1]"]


def test_a_deep_halo_sends_fewer_larger_messages_and_recomputes_the_overlap():
    site = HaloSite(grid=(256, 64), procs=(2,), radius=2, steps=6)
    deep = _stages(site, Plan(strategy="deep_halo", chunks=3, transport="p2p"))
    seq = _stages(site, Plan())
    deep_x = [s for s in deep if s.name.startswith("halo[")]
    seq_x = [s for s in seq if s.name.startswith("halo[")]
    assert len(deep_x) == 2 and len(seq_x) == 6
    assert deep_x[0].nbytes == 3 * seq_x[0].nbytes
    deep_compute = sum(s.duration_ms for s in deep if s.name.startswith("step["))
    seq_compute = sum(s.duration_ms for s in seq if s.name.startswith("step["))
    assert deep_compute > seq_compute


def test_the_space_enumerates_deep_halos_the_blocks_hold_and_prunes_the_rest_with_reasons():
    site = HaloSite(grid=(24, 8), procs=(2,), radius=4, steps=6)  # blocks of 12 rows hold 3 x 4
    space = enumerate_halo_plans(site)
    assert space.candidates[0] == Plan()
    deep = sorted(p.chunks for p in space.candidates if p.strategy == "deep_halo" and p.packing is None)
    assert deep == [2, 3] and any(p.plan.strategy == "overlap" for p in space.pruned) is False
    reasons = [p.reason for p in space.pruned if p.plan.strategy == "deep_halo"]
    assert reasons and "wider than the blocks" in reasons[0]
    one_step = enumerate_halo_plans(HaloSite(grid=(24, 8), procs=(2,), radius=1, steps=1))
    assert not [p for p in one_step.candidates if p.strategy == "deep_halo"]
    assert any("steps >= 2" in p.reason for p in one_step.pruned)


def test_search_keeps_sequential_when_compute_dominates_and_overlaps_when_the_exchange_hides():
    cluster = load_cluster("cpu-host")
    site = HaloSite(grid=(4096, 4096), procs=(2,), radius=4, steps=1)
    heavy = search_halo(site, cluster, compute=HaloCompute(full_ms=50.0, interior_ms=49.0, shell_ms=1.5))
    assert heavy.chosen == Plan()
    comm_ms = predict_halo(site, Plan(), cluster, compute=HaloCompute(full_ms=0.0, interior_ms=0.0, shell_ms=0.0))
    share = comm_ms.total_ms
    even = HaloCompute(full_ms=share, interior_ms=share, shell_ms=share * 0.05)
    result = search_halo(site, cluster, compute=even)
    assert result.chosen.strategy == "overlap", [(s.plan.describe(), s.predicted_ms) for s in result.ranked]
    assert result.chosen_ms < result.sequential_ms


def test_the_estimated_compute_scales_with_the_block_and_the_radius():
    device = load_cluster("cpu-host").device(0)
    small = estimated_compute(HaloSite(grid=(256, 256), procs=(2,), radius=1), device)
    large = estimated_compute(HaloSite(grid=(1024, 256), procs=(2,), radius=4), device)
    assert 0 < small.interior_ms < small.full_ms and large.full_ms > 4 * small.full_ms


def test_the_reference_and_the_laplacian_orders():
    from hocket.ops.stencil_fields import Carried, Static, pad_dims, reference_steps
    from hocket.ops.stencil_terms import laplacian, second_derivative_weights

    assert second_derivative_weights(1) == (-2.0, 1.0)
    assert second_derivative_weights(2) == pytest.approx((-2.5, 4 / 3, -1 / 12))
    x = torch.arange(12, dtype=torch.float64)
    for r in (1, 2, 4):  # exact on x^2 (and x^(2r+1)) for order 2r; reads only within r
        f = (x ** 2)[None, :].repeat(5, 1)
        lap = laplacian(pad_dims(f, r, 1, periodic=True), r, 1, periodic=False)
        assert torch.allclose(lap[:, r:-r], torch.full_like(lap[:, r:-r], 2.0), atol=1e-9)
    u = torch.randn(6, 5, dtype=torch.float64)
    step = lambda p: (p[0][1:-1] + p[2] * laplacian(p[0], 1, 1), p[0][1:-1])  # noqa: E731
    out = reference_steps((u, Carried(u.clone()), Static(torch.ones_like(u))), step, 1, 1, steps=2)
    assert isinstance(out[1], Carried) and isinstance(out[2], Static) and out[0].shape == u.shape


def test_hocket_predict_halo_lists_every_candidate_and_refuses_a_site_that_cannot_run(capsys):
    import json

    from hocket.cli.main import main

    args = ["predict", "halo", "--grid", "512x256", "--procs", "2", "--radius", "2", "--steps", "4",
            "--cluster", "cpu-host", "--dtype", "fp32"]
    assert main([*args, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["site"]["kind"] == "halo" and out["candidates"][0]["plan"]["strategy"] == "sequential"
    assert {c["plan"]["strategy"] for c in out["candidates"]} == {"sequential", "overlap", "deep_halo"}
    assert main(args) == 0 and "sequential" in capsys.readouterr().out
    assert main(["predict", "halo", "--grid", "10x4", "--procs", "3", "--radius", "1", "--cluster", "cpu-host"]) == 2
    assert "does not divide over 3 ranks" in capsys.readouterr().err
    assert main(["predict", "ag_mm", "--m", "64", "--k", "64", "--world", "2", "--cluster", "h200x2"]) == 2
    assert "needs --n" in capsys.readouterr().err


def test_per_face_sends_a_message_per_field_and_copies_only_what_is_not_contiguous():
    slabs = HaloSite(grid=(256, 64), procs=(2,), radius=2, steps=1, fields=2, boundary="periodic")
    packed = _stages(slabs, Plan(strategy="overlap", transport="p2p"))
    faces = _stages(slabs, Plan(strategy="overlap", transport="p2p", packing="per_face"))
    names = [s.name for s in faces if not s.is_issue]
    assert "pack[0]" not in names and "unpack[0]" not in names  # 1-D grid: every face is a contiguous slab
    assert "pack[0]" in [s.name for s in packed]
    x_packed = next(s for s in packed if s.name == "halo[0]")
    x_faces = next(s for s in faces if s.name == "halo[0]")
    assert x_faces.nbytes == x_packed.nbytes  # the same bytes, in twice the messages
    tiles = HaloSite(grid=(64, 64), procs=(2, 2), radius=2, steps=1, fields=2)
    tile_faces = _stages(tiles, Plan(strategy="overlap", transport="p2p", packing="per_face"))
    assert "pack[0]" in [s.name for s in tile_faces]  # a 2-D grid's faces are strided: copied


def test_the_space_offers_per_face_where_it_differs_from_packed():
    space = enumerate_halo_plans(HaloSite(grid=(24, 8), procs=(2,), radius=1, steps=2))
    assert Plan(packing="per_face") in space.candidates
    one_field_tiles = enumerate_halo_plans(HaloSite(grid=(24, 8), procs=(2, 2), radius=1, steps=2))
    assert not [p for p in one_field_tiles.candidates if p.packing]
    assert any("per_face" in p.reason for p in one_field_tiles.pruned)
    assert Plan(packing="per_face").to_json() != Plan().to_json()
    assert "packing" not in Plan().to_dict()
    with pytest.raises(ValueError, match="Plan.packing='faces'"):
        Plan(packing="faces")
