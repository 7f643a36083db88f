"""Which plans a CUDA graph can capture (hocket.plan.capture), and the captured planner's space."""

from __future__ import annotations

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.hardware import load_preset
from hocket.plan.capture import capturable, capture_refusal
from hocket.plan.space import SpaceConfig, enumerate_plans, group_facts

AG = Site(kind="ag_mm", m=8192, k=4096, n=1536, dtype="bfloat16", world=2)
RS = Site(kind="mm_rs", m=8192, k=2048, n=4096, dtype="bfloat16", world=2)
AR = Site(kind="mm_ar", m=4096, k=2048, n=4096, dtype="bfloat16", world=2)
CE = dict(strategy="chunked", transport="copy_engine")


@pytest.mark.parametrize("site,plan", [
    (AG, Plan(strategy="chunked", chunks=4)), (RS, Plan(strategy="ring", transport="p2p")),
    (RS, Plan(strategy="chunked", chunks=3, transport="host_staged", order="local_first")),
    (AG, Plan(**CE, chunks=1)), (AG, Plan(**CE, chunks=8)), (RS, Plan(**CE, chunks=1)),
])
def test_nccl_relay_and_barrier_protocol_plans_capture(site, plan):
    assert capturable(site, plan)


@pytest.mark.parametrize("site,plan,words", [
    (RS, Plan(**CE, chunks=4), "push protocol"),
    (AR, Plan(**CE, chunks=2), "push protocol"),
    (AG, Plan(strategy="tile_fused", chunks=1, transport="copy_engine"), "error buffers"),
    (AG, Plan(strategy="tile_fused", chunks=1, transport="peer_read"), "error buffers"),
    (Site(kind="ag_mm", m=512, k=256, n=128, dtype="bfloat16", world=2, dim=-1), Plan(**CE, chunks=2), "last dim"),
])
def test_the_others_are_refused_with_the_reason(site, plan, words):
    assert words in capture_refusal(site, plan)


def test_the_push_protocol_makes_an_all_gather_uncapturable():
    assert capture_refusal(AG, Plan(**CE, chunks=2)) is None
    assert "push protocol" in capture_refusal(AG, Plan(**CE, chunks=2, protocol="push"))


def test_the_captured_space_prunes_what_a_graph_cannot_replay():
    facts = group_facts(RS, load_preset("h200x2"))
    eager = enumerate_plans(RS, facts, SpaceConfig())
    replayed = enumerate_plans(RS, facts, SpaceConfig(captured=True))
    assert set(replayed.candidates) < set(eager.candidates)
    assert all(capturable(RS, p) for p in replayed.candidates)
    assert Plan(**CE, chunks=1) in replayed.candidates
    refused = [p for p in replayed.pruned if p.reason.startswith("a CUDA graph cannot capture it")]
    assert {p.plan for p in refused} == set(eager.candidates) - set(replayed.candidates)
    assert any(p.plan.strategy == "tile_fused" for p in refused)


def test_captured_must_be_a_bool():
    with pytest.raises(ValueError, match="SpaceConfig.captured"):
        SpaceConfig(captured="yes")
