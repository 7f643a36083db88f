"""The saving rule with the model's per-class error: hand-computed toy tables."""

from __future__ import annotations

import pytest

from hocket.core.plan import Plan
from hocket.hardware.profile import CalibrationProfile, ContentionPoint, CurvePoint
from hocket.plan.search import PricedMs, SearchConfig, select
from hocket.plan.uncertainty import (
    NO_UNCERTAINTY,
    PLAN_CLASSES,
    Uncertainty,
    calibrated_classes,
    plan_class,
    uncertainty_from_profile,
)

SEQ = Plan()
CH4 = Plan(strategy="chunked", chunks=4)
RING = Plan(strategy="ring", chunks=1, transport="p2p")
FUSED = Plan(strategy="tile_fused", chunks=4, transport="copy_engine")
TOY = Uncertainty(rel_error={"sequential": 0.0, "pipelined": 0.05, "copy_engine": 0.05, "ring": 0.20,
                             "tile_fused": 0.10, "host_staged": 0.02}, per_piece_error=0.01)


def test_error_per_class_and_pieces():
    assert [plan_class(p) for p in (SEQ, CH4, RING, FUSED)] == ["sequential", "pipelined", "ring", "tile_fused"]
    assert plan_class(CH4.with_(transport="host_staged")) == "host_staged"
    assert TOY.error_of(SEQ) == 0.0
    assert TOY.error_of(CH4) == pytest.approx(0.05 + 3 * 0.01)
    assert TOY.error_of(RING) == pytest.approx(0.20)
    assert TOY.pessimistic_ms(RING, 10.0) == pytest.approx(12.0)


def test_a_large_class_error_keeps_sequential():
    # ring predicted 20% faster: pessimistic 8.0 * 1.20 = 9.6 < 10 * 0.97 = 9.7, chosen
    chosen, _, _ = select([(SEQ, 10.0), (RING, 8.0)], baseline=SEQ, uncertainty=TOY)
    assert chosen == RING
    # predicted 15% faster: 8.5 * 1.20 = 10.2 >= 9.7: kept out, with the reason
    chosen, chosen_ms, ranked = select([(SEQ, 10.0), (RING, 8.5)], baseline=SEQ, uncertainty=TOY)
    assert chosen == SEQ and chosen_ms == 10.0
    reason = {s.plan: s.reason for s in ranked}[RING]
    assert "model error (20.0%)" in reason
    # the plain margin alone would take it
    assert select([(SEQ, 10.0), (RING, 8.5)], baseline=SEQ)[0] == RING


def test_the_lowest_pessimistic_price_wins_not_the_lowest_prediction():
    # ring 7.0 -> 8.4 pessimistic; chunked(4) 7.5 -> 7.5 * 1.08 = 8.1: chunked(4) wins
    chosen, chosen_ms, ranked = select([(SEQ, 10.0), (RING, 7.0), (CH4, 7.5)], baseline=SEQ, uncertainty=TOY)
    assert chosen == CH4 and chosen_ms == 7.5
    assert [s.plan for s in ranked] == [RING, CH4, SEQ]  # ranked stays by prediction (autotune's top-k)
    assert "slower once each plan's model error is counted" in ranked[0].reason


def test_profile_decides_which_classes_are_measured():
    profile = CalibrationProfile(fingerprint="toy", collectives={"all_gather": (CurvePoint(bytes=1 << 20, ms=1.0),)},
                                 p2p=(CurvePoint(bytes=1 << 20, ms=0.5),),
                                 contention={"sm_collective": ContentionPoint(gemm_slowdown=1.1,
                                                                              transfer_slowdown=1.2)})
    assert calibrated_classes(profile) == {"sequential", "pipelined"}  # P2P has a curve but no contention entry
    assert calibrated_classes(None) == {"sequential"}
    u = uncertainty_from_profile(profile, TOY)
    assert u.error_of(CH4) == pytest.approx(TOY.error_of(CH4))
    assert u.error_of(RING) == pytest.approx(0.20 * TOY.uncalibrated_factor)
    assert NO_UNCERTAINTY.error_of(RING) == 0.0


@pytest.mark.parametrize("kwargs,match", [
    (dict(rel_error={"sequential": 0.0}), "missing"),
    (dict(rel_error={**{c: 0.1 for c in PLAN_CLASSES}, "ring": 1.5}), r"rel_error\['ring'\]"),
    (dict(uncalibrated_factor=0.5), "uncalibrated_factor"),
    (dict(calibrated={"warp"}), "calibrated"),
    (dict(host_spread=0.5), "host_spread"),
])
def test_bad_uncertainty_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Uncertainty(**kwargs)
    with pytest.raises(ValueError, match="uncertainty"):
        SearchConfig(uncertainty="often")


def test_a_plan_host_bound_on_a_slower_host_keeps_sequential():
    # 20% faster on the device, but its host issue time (5 ms) on a host twice as slow (10 ms) leaves less
    # than the margin: sequential; the same plan with a short host chain is chosen; host_staged plans take
    # no host stretch (their issue costs are the measured relay's), and NO_UNCERTAINTY trusts the host
    toy = Uncertainty(rel_error=TOY.rel_error, per_piece_error=0.0, host_spread=2.0)
    ce = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    chosen, _, ranked = select([(SEQ, 10.0), (ce, PricedMs(8.0, host_ms=5.0))], baseline=SEQ, uncertainty=toy)
    assert chosen == SEQ and "host-bound" in {s.plan: s.reason for s in ranked}[ce]
    assert select([(SEQ, 10.0), (ce, PricedMs(8.0, host_ms=1.0))], baseline=SEQ, uncertainty=toy)[0] == ce
    assert toy.pessimistic_ms(ce, 8.0, 4.5) == pytest.approx(9.0)
    relay = CH4.with_(transport="host_staged")
    assert toy.pessimistic_ms(relay, 8.0, 4.5) == pytest.approx(8.0 * (1 + toy.error_of(relay)))
    assert NO_UNCERTAINTY.pessimistic_ms(ce, 8.0, 7.9) == pytest.approx(8.0)
    assert float(PricedMs(3.0, host_ms=1.0)) == 3.0 and PricedMs(3.0).host_ms == 0.0


def test_predicted_prices_carry_the_host_issue_time():
    from hocket.core.site import Site
    from hocket.hardware import load_preset
    from hocket.plan.search import predict_cost_fn
    from hocket.strategies import pipeline_stages

    cluster = load_preset("h200x2")
    site = Site(kind="mm_rs", m=8192, k=2048, n=4096, world=2)
    cost = predict_cost_fn(cluster)
    for plan in (SEQ, Plan(strategy="chunked", chunks=1, transport="copy_engine")):
        priced = cost(site, plan)
        host = sum(s.duration_ms for s in pipeline_stages(site, plan, cluster) if s.is_issue)
        assert priced.host_ms == pytest.approx(host) and 0 < priced.host_ms <= float(priced)


def _host_profile(*, relay: bool) -> CalibrationProfile:
    point = (CurvePoint(bytes=1 << 20, ms=0.05),)
    return CalibrationProfile(fingerprint="toy", host_link=point, host_relay=point if relay else (),
                              contention={"host_link": ContentionPoint(gemm_slowdown=1.05, transfer_slowdown=1.1)})


def test_a_relay_between_ranks_counts_as_measured_only_with_its_own_curve():
    staged = CH4.with_(transport="host_staged")
    without, with_relay = _host_profile(relay=False), _host_profile(relay=True)
    # one device's host copies need only the host link; a relay between ranks also its own curve
    assert "host_staged" in calibrated_classes(without, 1)
    assert "host_staged" not in calibrated_classes(without, 2)
    assert "host_staged" in calibrated_classes(with_relay, 2)
    toy = Uncertainty(rel_error=TOY.rel_error, per_piece_error=0.01, uncalibrated_rel_error={"host_staged": 0.15})
    # measured: the class constant plus three more pieces; not measured: the derived uncalibrated error instead
    assert uncertainty_from_profile(with_relay, toy, world=2).error_of(staged) == pytest.approx(0.02 + 0.03)
    assert uncertainty_from_profile(without, toy, world=2).error_of(staged) == pytest.approx(0.15 + 0.03)
    assert uncertainty_from_profile(without, toy, world=1).error_of(staged) == pytest.approx(0.02 + 0.03)
    # a class without a derived uncalibrated error keeps the factor
    assert uncertainty_from_profile(without, toy, world=2).error_of(RING) == pytest.approx(0.20 * toy.uncalibrated_factor)
    with pytest.raises(ValueError, match="world"):
        calibrated_classes(with_relay, 0)


@pytest.mark.parametrize("kwargs,match", [
    (dict(uncalibrated_rel_error={"warp": 0.1}), "unknown class 'warp'"),
    (dict(uncalibrated_rel_error={"host_staged": 1.2}), r"uncalibrated_rel_error\['host_staged'\]"),
])
def test_bad_uncalibrated_error_is_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Uncertainty(**kwargs)
