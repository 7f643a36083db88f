"""Plan parsing for the op schemas, choose_plan caching, HOCKET_DISABLE, unsupported strategies, Sites."""

from __future__ import annotations

import pytest
import torch

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.ops import planning
from hocket.ops.executors import supported_table
from hocket.ops.lowering import executor_for
from hocket.ops.planning import choose_plan, plan_text, resolve_plan
from hocket.ops.sites import site_for_call


def _site(kind="ag_mm", **kw):
    return Site(kind=kind, m=64, k=32, n=16, dtype="float32", world=2, **kw)


def test_plan_text_accepts_every_form_and_round_trips():
    plan = Plan(strategy="chunked", chunks=3)
    site = _site()
    for given in (plan, plan.to_dict(), plan.to_json(), plan.to_json()):
        assert resolve_plan(plan_text(given), site) == plan
    assert resolve_plan(plan_text("ring"), site) == Plan(strategy="ring")
    assert plan_text(None) == ""
    with pytest.raises(TypeError, match="plan="):
        plan_text(3.5)


def test_unknown_strategy_and_bad_chunks_are_named():
    with pytest.raises(ValueError, match="strategy='warp'"):
        resolve_plan("warp", _site())
    with pytest.raises(ValueError, match="chunks=0"):
        resolve_plan('{"strategy": "chunked", "chunks": 0}', _site())


@pytest.mark.parametrize("kind, strategy", [("ag_mm", "substituted"), ("mm_rs", "substituted"),
                                            ("ag_mm", "tile_fused"), ("mm_ar", "tile_fused")])
def test_unsupported_pair_names_strategy_op_and_alternatives(kind, strategy):
    with pytest.raises(ValueError) as info:
        resolve_plan(strategy, _site(kind))
    msg = str(info.value)
    assert strategy in msg and kind in msg and "sequential" in msg


def test_every_supported_pair_has_an_executor():
    for kind, strategies in supported_table().items():
        for strategy in strategies:
            assert callable(executor_for(kind, strategy))


def test_choose_plan_is_cached_per_site_key(monkeypatch):
    calls = []

    def counting(site, captured=False):
        calls.append((site.key, captured))
        return Plan(strategy="chunked", chunks=8 if captured else 2)

    import hocket.ops.live as live

    planning.clear_plan_cache()
    monkeypatch.setattr(live, "plan_for_call", counting)
    a, b = _site(), _site(kind="mm_rs")
    assert choose_plan(a) == choose_plan(a) == Plan(strategy="chunked", chunks=2)
    choose_plan(b)
    with planning.captured_planning():  # planned for CUDA graph replays: asked once more, cached apart
        assert choose_plan(a) == choose_plan(a) == Plan(strategy="chunked", chunks=8)
    assert choose_plan(a) == Plan(strategy="chunked", chunks=2)
    assert calls == [(a.key, False), (b.key, False), (a.key, True)]
    planning.clear_plan_cache()


def test_disable_forces_sequential(monkeypatch):
    monkeypatch.setenv("HOCKET_DISABLE", "1")
    assert resolve_plan("ring", _site()).strategy == "sequential"
    monkeypatch.setenv("HOCKET_DISABLE", "0")
    assert resolve_plan("ring", _site()).strategy == "ring"


def test_site_for_call_follows_the_shape_convention():
    A = torch.randn(2, 3, 8)
    s = site_for_call("ag_mm", A=A, Bs=[torch.randn(8, 5)] * 2, dim=0, world=4)
    assert (s.m, s.k, s.n, s.num_b, s.dim, s.world) == (24, 8, 5, 2, 0, 4)
    s = site_for_call("ag_mm", A=A, Bs=[torch.randn(32, 5)], dim=2, world=4)
    assert (s.m, s.k, s.n, s.dim) == (6, 32, 5, -1)
    s = site_for_call("ag_mm", A=A, Bs=[torch.randn(8, 5), torch.randn(8, 3)], dim=1, world=4)
    assert (s.m, s.n, s.num_b, s.dim) == (24, 8, 1, 1)
    s = site_for_call("mm_rs", A=A, Bs=[torch.randn(8, 4)], dim=2, world=2, direction="backward")
    assert (s.m, s.k, s.n, s.dim, s.direction) == (6, 8, 4, -1, "backward")
    s = site_for_call("mm_ar", A=A.to(torch.bfloat16), Bs=[torch.randn(8, 4)], world=2)
    assert (s.m, s.k, s.n, s.dtype) == (6, 8, 4, "bfloat16")
    with pytest.raises(ValueError, match="kind='a2a'"):
        site_for_call("a2a", A=A, Bs=[A], world=2)


def test_plan_text_conversions_are_cached_and_exact():
    from hocket.ops.planning import parse_plan

    site = Site(kind="ag_mm", m=64, k=8, n=16, dtype="float32", world=2)
    plans = [Plan(strategy="chunked", chunks=c, order=o) for c in (2, 3, 8) for o in ("natural", "reverse")]
    for plan in plans:
        text = plan_text(plan)
        assert text == plan.to_json()
        assert plan_text(plan) is text  # the second call is a cache hit: the same string object
        first, again = resolve_plan(text, site), resolve_plan(text, site)
        assert first == plan and first is again  # parsed once, then the cached frozen Plan
    with pytest.raises(ValueError):
        parse_plan('{"strategy": "chunked", "chunks": 0}')
    with pytest.raises(ValueError):  # a bad plan raises on every call, not only the first
        parse_plan('{"strategy": "chunked", "chunks": 0}')
