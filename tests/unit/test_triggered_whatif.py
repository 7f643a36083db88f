"""The hypothetical ``triggered`` transport (hocket.cost.triggered, hocket.sim.what_if): offered only where a
cluster declares it, priced as its stage pipeline, marked hypothetical, and the step what-if."""

from __future__ import annotations

import pytest

from hocket.core.site import Site
from hocket.cost.stages import schedule
from hocket.cost.triggered import (
    LABEL,
    TRIGGERED,
    HypotheticalTransportError,
    price_triggered,
    triggered_reason,
    triggered_stages,
)
from hocket.hardware import PresetError, cluster_from_dict, list_presets, load_preset
from hocket.hardware.spec import HYPOTHETICAL_TRANSPORTS, IslandSpec
from hocket.strategies import predict

DECLARING = {"h200x8-triggered"}
RS = Site(kind="mm_rs", m=8192, k=3584, n=8192, world=8)


def test_no_preset_but_the_declaring_ones_offers_a_hypothetical_transport():
    names = list_presets()
    assert DECLARING <= set(names)
    for name in names:
        cluster = load_preset(name)
        world = cluster.world_size
        groups = [range(world)] + [range(start, min(world, start + 8)) for start in (0, world // 2)]
        for ranks in groups:
            ranks = list(ranks)
            if len(ranks) < 2:
                continue
            offered = cluster.what_if_offered(ranks)
            assert not set(HYPOTHETICAL_TRANSPORTS) & cluster.group_transports(ranks), name  # never a real one
            if name in DECLARING:
                assert offered == {TRIGGERED}, name
            else:
                assert offered == frozenset(), name
                assert cluster.what_if_transports == frozenset(), name


def test_triggered_needs_a_declaration_and_a_peer_path():
    plain = load_preset("h200x8")
    assert "declare" in triggered_reason(RS, plain)
    with pytest.raises(HypotheticalTransportError, match="does not declare"):
        price_triggered(RS, plain)
    # a cluster of two vendors declaring it: no peer path between them, so not offered there
    mixed = cluster_from_dict({"name": "mixed-what-if", "nodes": [{"node": "mixed-l20-mi210", "count": 1}],
                               "what_if": ["triggered"]})
    assert mixed.what_if_offered(range(8)) == frozenset()
    assert mixed.what_if_offered(range(4)) == {TRIGGERED}  # the four L20s do have one
    assert "peer path" in triggered_reason(Site(kind="mm_rs", m=64, k=64, n=64, world=8), mixed)
    assert "not served" in triggered_reason(Site(kind="ag_mm", m=64, k=64, n=64, world=8), load_preset(
        "h200x8-triggered"))


def test_hardware_files_refuse_triggered_outside_the_what_if_field():
    with pytest.raises(PresetError, match="what_if"):
        cluster_from_dict({"name": "x", "nodes": [{"node": "hgx-h200", "count": 1}], "what_if": ["p2p"]})
    with pytest.raises(PresetError, match="what_if"):
        cluster_from_dict({"name": "x", "nodes": [{"node": "hgx-h200", "count": 1}], "what_if": "triggered"})
    island = load_preset("h200x8").node(0).islands[0]
    with pytest.raises(ValueError, match="no hardware offers"):
        IslandSpec(device=island.device, count=2, fabric="switch", link=island.link,
                   transports=["collective", "triggered"])


def test_the_price_is_its_stage_pipeline_and_marked_hypothetical():
    cluster = load_preset("h200x8-triggered")
    for site in (RS, Site(kind="mm_ar", m=8192, k=1024, n=8192, world=8)):
        price = price_triggered(site, cluster)
        assert price.hypothetical and price.label == LABEL and "hypothetical" in LABEL
        assert price.to_dict()["hypothetical"] is True
        assert schedule(triggered_stages(price)).total_ms == pytest.approx(price.total_ms, rel=1e-9)
        assert all(s.name.startswith("triggered:") for s in triggered_stages(price))
        # no SM lent and no decomposition: at least the GEMM alone and the transfer alone, and below sequential
        assert price.total_ms >= max(price.compute_ms, price.scatter_ms)
        assert price.total_ms < predict(site, None, cluster).total_ms
    # an mm_ar pays its all-gather half after the GEMM
    ar = price_triggered(Site(kind="mm_ar", m=8192, k=1024, n=8192, world=8), cluster)
    assert ar.gather_ms > 0 and ar.total_ms >= ar.gather_ms + ar.compute_ms


def test_the_step_what_if_saves_time_and_its_baseline_is_the_simulators():
    from hocket.models.step import model_step_sites
    from hocket.sim.pricing import Pricer
    from hocket.sim.step import plan_chooser, simulate_step
    from hocket.sim.what_if import _simulate, what_if_step

    cluster = load_preset("h200x8-triggered")
    step = model_step_sites("llama3-8b", tp=8, pp=1, dp=1, seq=2048, batch=1, cluster=cluster)
    planned = simulate_step(step, cluster, plan="sequential").step_ms
    # the what-if's own run of the simulator with the plain pricer is simulate_step's
    same, _ = _simulate(step, cluster, Pricer(cluster, choose_plan=plan_chooser("sequential")))
    assert same == pytest.approx(planned, rel=1e-9)
    result = what_if_step(step, cluster, plan="sequential")
    assert result.step_ms == pytest.approx(planned, rel=1e-9)
    assert 0 < result.saving_ms < result.step_ms
    served = [s for s in result.sites if s.triggered_ms is not None]
    assert served and all(s.kind in ("mm_rs", "mm_ar") for s in served)
    assert all(s.reason for s in result.sites if s.triggered_ms is None)
    data = result.to_dict()
    assert data["hypothetical"] is True and "hypothetical" in data["label"]
    with pytest.raises(ValueError, match="does not declare"):
        what_if_step(step, load_preset("h200x8"))
    with pytest.raises(ValueError, match="unknown"):
        what_if_step(step, cluster, transport="magic")


def test_what_if_text_marks_every_headline_hypothetical():
    from hocket.cli._shards import what_if_section, what_if_text
    from hocket.models.step import model_step_sites

    cluster = load_preset("h200x8-triggered")
    step = model_step_sites("llama3-8b", tp=8, pp=1, dp=1, seq=2048, batch=1, cluster=cluster)
    text = what_if_text(what_if_section(step, cluster, plan="sequential"))
    assert text.startswith("WHAT-IF, HYPOTHETICAL") and "mlp.down" in text


@pytest.mark.skipif("triggered" not in __import__("hocket.core.plan", fromlist=["TRANSPORTS"]).TRANSPORTS,
                    reason="Plan.transport accepts 'triggered' once hocket.core.plan.TRANSPORTS lists it")
def test_an_operator_given_the_hypothetical_transport_raises():
    from hocket.core.plan import Plan
    from hocket.ops.planning import check_supported

    with pytest.raises(ValueError, match="hypothetical"):
        check_supported("mm_rs", Plan(strategy="chunked", chunks=2, transport="triggered"))
    with pytest.raises(ValueError, match="offered"):
        predict(RS, Plan(transport="triggered"), load_preset("h200x8-triggered"))
    assert TRIGGERED not in load_preset("h200x8-triggered").group_transports([0])
