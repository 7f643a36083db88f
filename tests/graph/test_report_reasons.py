"""explain never shows a pattern left alone without its reason: the records refuse to exist without one."""

from __future__ import annotations

import pytest

from hocket.core.plan import SEQUENTIAL, Plan
from hocket.core.site import Site
from hocket.graph.report import Explanation, GraphReport, LeftAlone, SiteRecord

SITE = Site(kind="ag_mm", m=64, k=32, n=48, world=2)


@pytest.mark.parametrize("reason", ["", "   "])
def test_a_site_left_as_traced_needs_a_reason(reason):
    with pytest.raises(ValueError, match="needs its reason"):
        SiteRecord(graph="forward#0", site=SITE, plan=SEQUENTIAL, source="predicted", rewritten=False,
                   predicted_sequential_ms=1.0, predicted_ms=1.0, reason=reason)


@pytest.mark.parametrize("reason", ["", " "])
def test_a_collective_left_alone_needs_a_reason(reason):
    with pytest.raises(ValueError, match="must say why"):
        LeftAlone(graph="backward#0", collective="all_reduce", node="all_reduce_3", reason=reason)


def test_every_reason_is_in_the_text():
    kept = SiteRecord(graph="forward#0", site=SITE, plan=SEQUENTIAL, source="autotune", rewritten=False,
                      predicted_sequential_ms=2.0, predicted_ms=2.0, reason="sequential chosen (measured fastest)")
    done = SiteRecord(graph="forward#0", site=SITE, plan=Plan(strategy="ring", chunks=1, transport="p2p"),
                      source="autotune", rewritten=True, predicted_sequential_ms=2.0, predicted_ms=1.5)
    left = LeftAlone(graph="forward#0", collective="all_gather_into_tensor", node="ag_7",
                     reason="no matmul reads the gathered tensor as its input")
    text = Explanation(graphs=(GraphReport(graph="forward#0", direction="forward", sites=(kept, done),
                                           left_alone=(left,)),)).format()
    assert kept.reason in text and left.reason in text and "rewritten" in text
