"""The MoE plan space, search and plan=None choice (hocket.plan.moe), and ``hocket predict moe``."""

from __future__ import annotations

import json

import pytest

from hocket.core.moe import MoeSite, zipf_counts
from hocket.core.plan import Plan
from hocket.hardware import load_cluster
from hocket.plan.moe import (
    BASELINE,
    choose_moe_plan,
    enumerate_moe_plans,
    forget_moe_plans,
    search_moe,
)
from hocket.strategies.moe import predict_moe

CPU = load_cluster("cpu-host")
H200X2 = load_cluster("h200x2")
H200X8 = load_cluster("h200x8")


def site(**kw) -> MoeSite:
    base = {"kind": "a2a_mm", "tokens": 256, "hidden": 512, "ffn": 256, "experts": 8, "topk": 2, "world": 2,
            "dtype": "bfloat16"}
    base.update(kw)
    return MoeSite(**base)


def reasons(space) -> list[tuple[str, str]]:
    return [(p.plan.describe(), p.reason) for p in space.pruned]


def test_the_space_crosses_strategies_splits_transports_and_chunks_and_says_why_it_left_plans_out():
    s = site(experts=8, world=2)  # 4 local experts
    space = enumerate_moe_plans(s, H200X2)
    assert space.candidates[0] == BASELINE == Plan(splits="exchanged")
    plans = set(space.candidates)
    for splits in ("exchanged", "padded"):
        for transport in ("collective", "host_staged"):
            assert Plan(strategy="sequential", transport=transport, splits=splits) in plans
            assert Plan(strategy="per_source", transport=transport, splits=splits) in plans
            for chunks in (2, 4, 8, 16):
                assert Plan(strategy="token_blocks", chunks=chunks, transport=transport, splits=splits) in plans
            assert Plan(strategy="expert_groups", chunks=4, transport=transport, splits=splits) in plans
    text = reasons(space)
    assert any(label.startswith("expert_groups(8)") and "4 local experts" in why for label, why in text)
    assert any(label.startswith("shared_overlap") and "shared_ffn=0" in why for label, why in text)
    assert any(label.startswith("chunked") for label, _ in text) and not any(p.strategy == "chunked" for p in plans)
    assert any(label.startswith("overlap") and "halo" in why for label, why in text)
    # a CPU cluster offers no host-staged relay: left out with the reason
    cpu = enumerate_moe_plans(s, CPU)
    assert not any(p.transport == "host_staged" for p in cpu.candidates)
    assert any("host_staged" in label and "not offered" in why for label, why in reasons(cpu))
    assert any(p.strategy == "shared_overlap" for p in enumerate_moe_plans(site(shared_ffn=64), CPU).candidates)
    # one local expert: no expert groups; one token: no token blocks
    small = enumerate_moe_plans(site(experts=2, tokens=1), CPU)
    assert not any(p.strategy in ("expert_groups", "token_blocks") for p in small.candidates)
    with pytest.raises(TypeError, match="MoeSite"):
        enumerate_moe_plans(object())


CASES = [
    (CPU, site(dtype="float32", tokens=64)),
    (CPU, site(dtype="float32", tokens=512, counts=zipf_counts(512, 2, 8, 2, s=1.5), shared_ffn=256)),
    (H200X2, site(tokens=8192, hidden=4096, ffn=2048)),
    (H200X2, site(kind="mm_a2a", tokens=64)),
    (H200X8, site(world=8, experts=64, topk=8, tokens=4096, hidden=2048, ffn=768,
                  counts=zipf_counts(4096, 8, 64, 8, s=1.0))),
    (H200X8, site(world=8, experts=8, topk=2, tokens=16384, hidden=4096, ffn=14336, shared_ffn=4096,
                  direction="backward")),
]


@pytest.mark.parametrize("cluster,s", CASES, ids=[f"{c.name}-{s.kind}-{i}" for i, (c, s) in enumerate(CASES)])
def test_the_search_never_chooses_a_plan_predicted_slower_than_sequential(cluster, s):
    result = search_moe(s, cluster)
    assert result.sequential == BASELINE
    assert result.sequential_ms == pytest.approx(predict_moe(s, BASELINE, cluster).total_ms)
    assert result.chosen_ms <= result.sequential_ms
    if result.chosen != BASELINE:
        assert result.chosen_ms < result.sequential_ms * (1 - result.margin)
    assert {x.plan for x in result.ranked} == set(enumerate_moe_plans(s, cluster).candidates)
    times = [x.predicted_ms for x in result.ranked]
    assert times == sorted(times)


def test_a_layer_whose_shared_expert_fits_in_the_dispatch_is_planned_to_overlap_it():
    # a Qwen3-shaped layer over 8 ranks with a wide shared expert: the dispatch's gap hides it
    s = site(world=8, experts=128, topk=8, tokens=8192, hidden=2048, ffn=768, shared_ffn=8192)
    layer = search_moe(s, H200X8, layer=True)
    assert layer.chosen.strategy == "shared_overlap" and layer.saving_ms > layer.margin * layer.sequential_ms
    alone = search_moe(s, H200X8)
    assert layer.sequential_ms > alone.sequential_ms  # the layer adds the combine half


def test_plan_none_is_the_searchs_choice_kept_per_site_key():
    forget_moe_plans()
    s = site(tokens=8192, hidden=4096, ffn=2048, shared_ffn=2048)
    chosen = choose_moe_plan(s, H200X2)
    assert chosen == search_moe(s, H200X2, layer=True).chosen  # one plan runs both halves: priced on both
    # the same key (same skew class, other counts): the kept decision
    twin = site(tokens=8192, hidden=4096, ffn=2048, shared_ffn=2048,
                counts=tuple(tuple(2048 for _ in range(8)) for _ in range(2)))
    assert twin.key == s.key and choose_moe_plan(twin, H200X2) == chosen
    from hocket.env import overridden

    with overridden({"HOCKET_DISABLE": "1"}):
        assert choose_moe_plan(s, H200X2) == BASELINE
    with overridden({"HOCKET_CLUSTER": "cpu-host"}):
        forget_moe_plans()
        small = site(dtype="float32", tokens=64)
        assert choose_moe_plan(small) == search_moe(small, CPU, layer=True).chosen
    forget_moe_plans()
    from hocket.plan.moe import MoePlanWarning

    with pytest.warns(MoePlanWarning, match="could not plan"):  # 8 ranks on a 2-GPU cluster
        assert choose_moe_plan(site(world=8, experts=8), H200X2) == BASELINE
    forget_moe_plans()
    with pytest.raises(TypeError, match="MoeSite"):
        choose_moe_plan("a2a_mm")


def test_tune_moe_times_the_shortlist_and_keeps_the_measured_choice(monkeypatch):
    import importlib

    from hocket.plan import moe as plan_moe

    autotune_module = importlib.import_module("hocket.plan.autotune")

    forget_moe_plans()
    s = site(tokens=8192, hidden=4096, ffn=2048, shared_ffn=2048)
    seen = {}

    def fake_autotune(site_arg, candidates, make_runner, **kw):
        seen["candidates"] = tuple(candidates)
        seen["key"] = kw["cache_key"]
        return autotune_module.AutotuneResult(site_key=site_arg.key, chosen=candidates[0], source="autotune",
                                              timings_ms={})

    monkeypatch.setattr(autotune_module, "autotune", fake_autotune)
    tuned = plan_moe.tune_moe(s, lambda plan: (lambda: None), cluster=H200X2)
    assert seen["candidates"][0] == BASELINE and len(seen["candidates"]) > 1 and seen["key"] == s.key
    assert tuned.chosen == BASELINE and choose_moe_plan(s, H200X2) == BASELINE  # measured beats predicted
    forget_moe_plans()


def test_hocket_predict_moe_prints_the_choice_every_candidate_and_the_pruned(capsys):
    from hocket.cli.main import main

    args = ["predict", "moe", "--hidden", "512", "--ffn", "256", "--experts", "8", "--topk", "2", "--tokens", "256",
            "--world", "2", "--dtype", "fp32", "--skew", "zipf:1.2", "--shared-ffn", "256", "--cluster", "cpu-host"]
    assert main([*args, "--json"]) == 0
    layer = json.loads(capsys.readouterr().out)["sites"]
    assert len(layer) == 1 and layer[0]["layer"] and layer[0]["site"]["kind"] == "a2a_mm"
    assert main([*args, "--json", "--moe-site", "both"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [r["site"]["kind"] for r in out["sites"]] == ["a2a_mm", "mm_a2a"]
    first = out["sites"][0]
    assert first["candidates"][0]["plan"]["strategy"] == "sequential" and first["skew_class"] > 1
    assert {c["plan"]["strategy"] for c in first["candidates"]} == {"sequential", "token_blocks", "per_source",
                                                                   "expert_groups", "shared_overlap"}
    assert any("not offered" in p["reason"] for p in first["pruned"])
    assert main([*args, "--moe-site", "a2a_mm", "--strategy", "token_blocks", "--chunks", "2", "--splits",
                 "padded"]) == 0
    table = capsys.readouterr().out
    assert "requested: token_blocks(2):padded" in table and "sequential:" in table and "pruned" in table
    assert main(["predict", "moe", "--hidden", "64", "--ffn", "64", "--experts", "6", "--topk", "2", "--tokens",
                 "8", "--world", "4", "--cluster", "cpu-host"]) == 2
    assert "does not divide over --world 4" in capsys.readouterr().err
    assert main(["predict", "moe", "--hidden", "64", "--cluster", "cpu-host"]) == 2
    assert "needs --ffn" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # argparse refuses it, naming the flag
        main([*args, "--skew", "zipf:x"])
    assert "--skew" in capsys.readouterr().err


def test_no_drawn_site_is_planned_slower_than_sequential():
    import random

    rng = random.Random(32)
    clusters = (CPU, H200X2, H200X8)
    for _ in range(24):
        cluster = rng.choice(clusters)
        world = rng.choice([w for w in (1, 2, 4, 8) if w <= cluster.world_size])
        e_local = rng.choice((1, 2, 4))
        experts, topk = world * e_local, rng.choice((1, 2, 8))
        topk = min(topk, experts)
        tokens = rng.choice((0, 1, 16, 512, 4096))
        skew = rng.choice((None, 0.8, 2.0))
        counts = zipf_counts(tokens, topk, experts, world, s=skew) if skew else ()
        s = site(world=world, experts=experts, topk=topk, tokens=tokens, hidden=rng.choice((256, 2048)),
                 ffn=rng.choice((128, 1408)), counts=counts, shared_ffn=rng.choice((0, 512)),
                 kind=rng.choice(("a2a_mm", "mm_a2a")), direction=rng.choice(("forward", "backward")),
                 dtype="float32" if cluster is CPU else "bfloat16")
        for layer in (False, True):
            result = search_moe(s, cluster, layer=layer)
            assert result.chosen_ms <= result.sequential_ms, (s, layer)
            if result.chosen != BASELINE:
                assert result.chosen_ms < result.sequential_ms * (1 - result.margin)
