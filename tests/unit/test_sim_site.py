"""Single-site simulation: equals hocket.cost.predict, symmetry reduction is exact, no NaN."""

from __future__ import annotations

import math
import random

import pytest
from _plans import spread_of_plans

from hocket.core.site import Site
from hocket.hardware.catalog import load_cluster
from hocket.sim.site import simulate_site
from hocket.sim.trace import chrome_trace
from hocket.strategies import predict

CLUSTERS = ("h100x8", "h200x2", "mixed-a100-h100", "h100-ib-2node", "cpu-host")


def _random_site(rng: random.Random, cluster) -> Site:
    kind = rng.choice(["ag_mm", "mm_rs", "mm_ar"])
    world = rng.choice([w for w in (2, 4, 8, 16) if w <= cluster.world_size])
    m = world * rng.randint(1, 512) * rng.choice([1, 8])
    return Site(kind=kind, m=m, k=rng.randint(1, 4096) * 2, n=rng.randint(1, 4096) * 2, world=world,
                dtype=rng.choice(["bf16", "fp16", "fp32"]), name=f"{kind}.test")


@pytest.mark.parametrize("cluster_name", CLUSTERS)
def test_single_site_equals_cost_predict(cluster_name):
    rng = random.Random()
    cluster = load_cluster(cluster_name)
    site = _random_site(rng, cluster)
    plans = spread_of_plans(site, cluster)
    for plan in [plans[0]] + rng.sample(plans[1:], min(6, len(plans) - 1)):
        sim = simulate_site(site, plan, cluster)
        pred = predict(site, plan, cluster)
        assert math.isfinite(sim.total_ms) and sim.total_ms > 0
        assert sim.total_ms == pytest.approx(pred.total_ms, rel=1e-9), plan.describe()
        assert sim.busy_ms() == pytest.approx(dict(pred.busy_ms), rel=1e-9)


def test_explicit_ranks_equal_class_reduced():
    rng = random.Random()
    cluster = load_cluster("h100x8")
    site = Site(kind=rng.choice(["ag_mm", "mm_rs"]), m=4 * rng.randint(64, 2048), k=rng.randint(256, 8192),
                n=rng.randint(256, 8192), world=4, dtype="bf16")
    for plan in rng.sample(spread_of_plans(site, cluster), 5):
        reduced = simulate_site(site, plan, cluster)
        explicit = simulate_site(site, plan, cluster, explicit_ranks=True)
        assert len(explicit.members) == 4 and len(reduced.members) == 1
        assert explicit.total_ms == pytest.approx(reduced.total_ms, rel=1e-12)
        # every rank's copy of a compute stage runs exactly when the class's does
        g_red, g_exp = reduced.timeline.graph, explicit.timeline.graph
        red_by_name = {g_red.names[t]: reduced.timeline.start_ms[t] for t in range(len(g_red))}
        for t in range(len(g_exp)):
            assert explicit.timeline.start_ms[t] == pytest.approx(red_by_name[g_exp.names[t]], abs=1e-12)
        # collectives span every rank: one trace event per participant
        transfers = [t for t in range(len(g_exp)) if len(g_exp.resources[t]) > 1]
        assert all(len(g_exp.resources[t]) == 4 for t in transfers)
        assert len(chrome_trace(explicit.timeline)["traceEvents"]) > len(chrome_trace(reduced.timeline)["traceEvents"])


def test_tiny_and_huge_sites_stay_finite():
    cluster = load_cluster("h100x8")
    for m, k, n in ((8, 1, 1), (8 * 2**17, 2**15, 2**15)):
        for kind in ("ag_mm", "mm_rs", "mm_ar"):
            site = Site(kind=kind, m=m, k=k, n=n, world=8)
            for plan in spread_of_plans(site, cluster)[:8]:
                sim = simulate_site(site, plan, cluster)
                assert all(math.isfinite(x) for x in sim.timeline.end_ms)
                assert sim.total_ms > 0


def test_bad_arguments_are_named():
    cluster = load_cluster("h100x8")
    with pytest.raises(TypeError, match="Site"):
        simulate_site({"kind": "ag_mm"}, None, cluster)
    site = Site(kind="ag_mm", m=64, k=64, n=64, world=8)
    with pytest.raises(TypeError, match="ClusterSpec"):
        simulate_site(site, None, "h100x8")
    with pytest.raises(ValueError, match="strategy"):
        simulate_site(site, {"strategy": "warp"}, cluster)
    big = Site(kind="ag_mm", m=64, k=64, n=64, world=16)
    with pytest.raises(ValueError, match="world"):
        simulate_site(big, None, cluster)
