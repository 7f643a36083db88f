"""The rule that makes candidates priced alike one row (`hocket predict`, `hocket.explain`)."""

from __future__ import annotations

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.graph.report import (
    ALIKE_REL_TOL,
    Explanation,
    GraphReport,
    SiteRecord,
    also_text,
    priced_alike,
    variant_name,
)


def test_groups_equal_prices_under_the_first_member():
    prices = [(1.0, 0.5), (2.0, 1.0), (1.0, 0.5), (2.0, 1.0 + 1e-12), (2.0, 1.1), (1.0, 0.5)]
    assert priced_alike(prices) == [0, 1, 0, 1, 4, 0]


def test_tolerance_is_relative_and_none_only_matches_none():
    a = 3.0
    assert priced_alike([(a,), (a * (1 + ALIKE_REL_TOL / 2),)]) == [0, 0]
    assert priced_alike([(a,), (a * (1 + 10 * ALIKE_REL_TOL),)]) == [0, 1]
    assert priced_alike([(0.0,), (1e-300,)]) == [0, 1]
    assert priced_alike([(1.0, None), (1.0, None), (1.0, 2.0)]) == [0, 0, 2]
    assert priced_alike([(1.0,), (1.0, 1.0)]) == [0, 1]


def test_members_are_compared_with_the_first_so_groups_do_not_chain():
    step = 0.6 * ALIKE_REL_TOL
    prices = [(1.0,), (1.0 + step,), (1.0 + 2 * step,)]
    assert priced_alike(prices) == [0, 0, 2]


def test_negative_tolerance_is_refused():
    with pytest.raises(ValueError, match="rel_tol"):
        priced_alike([(1.0,)], rel_tol=-1.0)


@pytest.mark.parametrize(("head", "label", "name"), [
    ("ring(1)/p2p", "ring(1)/p2p/sms=16", "/sms=16"),
    ("ring(1)/p2p", "ring(1)/p2p[reverse]/sms=16", "[reverse]/sms=16"),
    ("chunked(2)~fill", "chunked(2)/sms=16~fill", "/sms=16"),
    ("chunked(1)/copy_engine", "chunked(1)/copy_engine:pull", ":pull"),
    ("ring(1)/p2p[local_first]", "ring(1)/p2p", "ring(1)/p2p"),
    ("ring(1)", "ring(16)", "ring(16)"),
    ("bulk", "chunked(1)", "chunked(1)"),
])
def test_variant_names(head, label, name):
    assert variant_name(head, label) == name


def test_also_text():
    assert also_text("bulk", []) == ""
    assert also_text("bulk", ["bulk/sms=16", "chunked(1)"]) == "also: /sms=16, chunked(1)"


def _record(**kw):
    site = Site(kind="ag_mm", m=4096, k=4096, n=1024, dtype="bfloat16", world=8)
    return SiteRecord(graph="forward#0", site=site, plan=Plan(strategy="ring", chunks=1, transport="p2p"),
                      source="predicted", rewritten=True, predicted_sequential_ms=2.0, predicted_ms=1.0, **kw)


def test_explain_names_the_plans_priced_alike_on_the_site_row():
    alike = (Plan(strategy="ring", chunks=1, transport="p2p", comm_sms=16),
             Plan(strategy="ring", chunks=1, transport="p2p", order="reverse"))
    record = _record(alike=alike)
    assert record.to_dict()["alike"] == [p.to_dict() for p in alike]
    text = Explanation(graphs=(GraphReport(graph="forward#0", direction="forward", sites=(record,)),)).format()
    site_lines = [line for line in text.splitlines() if "forward#0" in line and "ag_mm" in line]
    assert len(site_lines) == 1
    assert site_lines[0].endswith("rewritten  (also: /sms=16, [reverse])")
    plain = Explanation(graphs=(GraphReport(graph="forward#0", direction="forward", sites=(_record(),)),)).format()
    assert "also:" not in plain and _record().to_dict()["alike"] == []


def test_alike_must_be_plans():
    with pytest.raises(TypeError, match="alike"):
        _record(alike=[Plan(strategy="bulk")])
