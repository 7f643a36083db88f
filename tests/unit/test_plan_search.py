"""Search: hand-computed optimum on toy cost tables, the sequential margin, reasons, dedupe."""

from __future__ import annotations

import math
import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.search import DEFAULT_MARGIN, SearchConfig, price_space, search, search_sites, select
from hocket.plan.space import GroupFacts, enumerate_plans

SEQ = Plan()
CH4 = Plan(strategy="chunked", chunks=4)
CH8 = Plan(strategy="chunked", chunks=8)
RING = Plan(strategy="ring", chunks=1, transport="p2p")
FACTS = GroupFacts(transports={"collective", "p2p", "copy_engine", "host_staged"}, sm_count=132,
                   memory_bytes=80 << 30)


def test_hand_computed_optimum_on_a_toy_table():
    # sequential 10 ms; the table's optimum is chunked(8) at 7.0 ms (30% saving)
    table = {SEQ: 10.0, CH4: 8.0, CH8: 7.0, RING: 7.5}
    chosen, chosen_ms, ranked = select(list(table.items()), baseline=SEQ)
    assert chosen == CH8 and chosen_ms == 7.0
    assert [s.plan for s in ranked] == [CH8, RING, CH4, SEQ]
    assert ranked[0].reason == "chosen"
    assert "slower than chunked(8)" in ranked[1].reason
    assert "30.0% faster" in ranked[-1].reason


def test_margin_keeps_sequential_unless_the_gain_is_clear():
    table = {SEQ: 10.0, CH4: 9.8}  # 2% faster: inside the 3% default margin
    chosen, chosen_ms, ranked = select(list(table.items()), baseline=SEQ)
    assert chosen == SEQ and chosen_ms == 10.0
    by_plan = {s.plan: s.reason for s in ranked}
    assert "within the 3% margin" in by_plan[CH4]
    assert "no plan beats sequential" in by_plan[SEQ]
    chosen, _, _ = select(list(table.items()), baseline=SEQ, margin=0.01)
    assert chosen == CH4
    chosen, _, _ = select([(SEQ, 10.0), (CH4, 9.7)], baseline=SEQ)  # exactly the margin is not enough
    assert chosen == SEQ
    chosen, _, _ = select([(SEQ, 10.0), (CH4, 9.69)], baseline=SEQ)
    assert chosen == CH4


def test_everything_slower_than_sequential_keeps_sequential():
    chosen, _, ranked = select([(SEQ, 5.0), (CH4, 6.0), (RING, 5.5)], baseline=SEQ)
    assert chosen == SEQ and ranked[0].plan == SEQ and ranked[0].reason == "chosen"
    assert "10.0% slower than sequential" in ranked[1].reason


def test_ties_prefer_the_simpler_plan():
    chosen, _, ranked = select([(SEQ, 10.0), (CH8, 5.0), (CH4, 5.0), (RING, 5.0)], baseline=SEQ)
    assert chosen == CH4
    assert [s.plan for s in ranked[:3]] == [CH4, CH8, RING]


@pytest.mark.parametrize("bad", [math.nan, math.inf, 0.0, -1.0])
def test_bad_predictions_are_refused_naming_the_plan(bad):
    with pytest.raises(ValueError, match=r"chunked\(4\)"):
        select([(SEQ, 1.0), (CH4, bad)], baseline=SEQ)


def test_baseline_must_be_priced_and_margin_checked():
    with pytest.raises(ValueError, match="baseline"):
        select([(CH4, 1.0)], baseline=SEQ)
    with pytest.raises(ValueError, match="margin"):
        select([(SEQ, 1.0)], baseline=SEQ, margin=1.5)


@pytest.mark.parametrize("seed", range(8))
def test_search_never_chooses_a_plan_not_clearly_faster_than_sequential(seed):
    rng = random.Random(seed)
    site = Site(kind=rng.choice(["ag_mm", "mm_rs", "mm_ar"]), m=4096, k=2048, n=1024, world=4)
    space = enumerate_plans(site, FACTS)
    costs = {plan: rng.uniform(0.5, 2.0) for plan in space.candidates}
    result = price_space(space, lambda s, p: costs[p], config=SearchConfig(exhaustive=True))
    seq_ms = costs[space.baseline]
    assert result.sequential_ms == seq_ms
    # the rule: a plan qualifies when its price inflated by its class's model error still
    # beats sequential by the margin; the lowest inflated price among those wins
    pessimistic = {p: result.uncertainty.pessimistic_ms(p, ms) for p, ms in costs.items() if p != space.baseline}
    eligible = {p: v for p, v in pessimistic.items() if v < seq_ms * (1 - DEFAULT_MARGIN)}
    if result.chosen != space.baseline:
        assert pessimistic[result.chosen] == min(eligible.values())
        assert result.chosen_ms < seq_ms * (1 - DEFAULT_MARGIN)
    else:
        assert not eligible
    assert [s.predicted_ms for s in result.ranked] == sorted(costs.values())
    assert len(result.ranked) == len(space.candidates)
    assert all(s.reason for s in result.ranked)
    assert result.top(3) == tuple(s.plan for s in result.ranked[:3])
    assert result.speedup >= 1.0


def test_chunk_ladder_stops_a_family_once_more_chunks_keep_losing():
    site = Site(kind="ag_mm", m=8192, k=1024, n=1024, world=8)
    space = enumerate_plans(site, FACTS)
    priced: list[Plan] = []
    noise = {plan: random.random() * 0.01 for plan in space.candidates}

    def cost(_site: Site, plan: Plan) -> float:  # every family's optimum is at 4 chunks
        priced.append(plan)
        return 10.0 if plan.strategy == "sequential" else 5.0 + abs(plan.chunks - 4) + noise[plan]

    result = price_space(space, cost)
    ring = sorted(p.chunks for p in priced if p.strategy == "ring" and p.transport == "p2p"
                  and p.order == "natural" and p.comm_sms is None)
    assert ring == [1, 2, 4, 8, 16]  # 8 and 16 lose twice in a row: 32 and 64 are skipped
    skipped = [p for p in result.pruned if p.reason.startswith("not priced")]
    assert skipped and all(p.plan.chunks > 16 for p in skipped)
    assert "chunks=4" in skipped[0].reason
    assert len(priced) + len(skipped) == len(space.candidates) == len(result.ranked) + len(skipped)
    assert result.chosen.chunks == 4
    full = price_space(space, cost, config=SearchConfig(exhaustive=True))
    assert len(full.ranked) == len(space.candidates) and full.chosen_ms == result.chosen_ms
    with pytest.raises(ValueError, match="chunk_patience"):
        SearchConfig(chunk_patience=0)


def test_search_sites_prices_each_distinct_key_once():
    catalog = pytest.importorskip("hocket.hardware.catalog")
    cluster = catalog.load_preset("h100x8")
    calls: list[tuple[str, Plan]] = []

    def cost(site: Site, plan: Plan) -> float:
        calls.append((site.key, plan))
        return 1.0 if plan.strategy == "sequential" else 1.0 + plan.chunks / 100

    qkv = Site(kind="ag_mm", m=4096, k=1024, n=3072, world=4, name="layers.0.qkv")
    sites = [qkv, Site(kind="ag_mm", m=4096, k=1024, n=3072, world=4, name="layers.1.qkv", count=3),
             Site(kind="mm_rs", m=4096, k=1024, n=1024, world=4)]
    results = search_sites(sites, cluster, cost_fn=cost)
    assert set(results) == {sites[0].key, sites[2].key}
    per_key = {key: sum(1 for k, _ in calls if k == key) for key in results}
    for key, result in results.items():
        # priced once each: ranked, or dropped as uneven pieces priced like their even twin
        twins = [r for r in result.pruned if "exactly like even ones" in r.reason]
        assert twins and all(r.plan.split_sizes is not None for r in twins)
        assert per_key[key] == len(result.ranked) + len(twins)
        assert result.chosen == Plan()


def test_structurally_equal_groups_are_searched_once_and_predict_alike():
    catalog = pytest.importorskip("hocket.hardware.catalog")
    cluster = catalog.load_preset("h100-ib-2node")
    sites = [Site(kind="mm_rs", m=4096, k=1024, n=2048, world=8, ranks=tuple(range(start, start + 8)))
             for start in (0, 8)]
    spanning = Site(kind="mm_rs", m=4096, k=1024, n=2048, world=8, ranks=tuple(range(4, 12)))
    searched: list[str] = []
    results = search_sites(sites + [spanning], cluster,
                           cost_fn=lambda s, p: searched.append(s.key) or (2.0 if p.chunks == 1 else 1.0))
    assert set(results) == {s.key for s in sites} | {spanning.key}
    assert results[sites[1].key].site == sites[1]
    assert results[sites[1].key].chosen == results[sites[0].key].chosen
    assert set(searched) == {sites[0].key, spanning.key}  # the node-spanning group is different
    # the signature is sound: the real cost model prices both node-local groups alike
    direct = [search(s, cluster) for s in sites]
    assert [r.sequential_ms for r in direct] == [direct[0].sequential_ms] * 2
    assert direct[0].chosen == direct[1].chosen and direct[0].chosen_ms == direct[1].chosen_ms


@pytest.mark.parametrize("preset,ranks", [("h100x8", range(8)), ("h100-ib-2node", range(4, 12)),
                                          ("mixed-nvidia-amd", range(4))])
def test_predict_cost_fn_equals_hocket_cost_predict(preset, ranks):
    hardware = pytest.importorskip("hocket.hardware")
    from hocket.plan.search import predict_cost_fn
    from hocket.plan.space import group_facts
    from hocket.strategies import predict

    cluster = hardware.load_preset(preset)
    rng = random.Random()
    world = len(ranks)
    site = Site(kind=rng.choice(["ag_mm", "mm_rs", "mm_ar"]), m=world * rng.randint(64, 1024),
                k=rng.randint(256, 8192), n=rng.randint(256, 8192), world=world, ranks=tuple(ranks))
    space = enumerate_plans(site, group_facts(site, cluster))
    cost = predict_cost_fn(cluster)
    steady = predict_cost_fn(cluster, steady_state=True)
    for plan in rng.sample(space.candidates, min(12, len(space.candidates))):
        assert cost(site, plan) == predict(site, plan, cluster).total_ms
        assert steady(site, plan) == predict(site, plan, cluster, steady_state=True).total_ms


def test_a_plan_the_cost_model_refuses_is_pruned_with_its_reason_but_sequential_must_price():
    site = Site(kind="mm_ar", m=2048, k=512, n=512, world=4)
    space = enumerate_plans(site, FACTS)

    def cost(_site: Site, plan: Plan) -> float:
        if plan.strategy == "substituted":
            raise ValueError("no model for substituted here")
        return 2.0 if plan.strategy == "sequential" else 1.0 + plan.chunks / 1000

    result = price_space(space, cost)
    assert result.chosen.strategy == "bulk"  # the toy cost's optimum: the one-piece pipeline (1.001)
    refused = [p for p in result.pruned if "cannot price" in p.reason]
    assert refused and all(p.plan.strategy == "substituted" for p in refused)
    assert "no model for substituted here" in refused[0].reason

    def broken(_site: Site, plan: Plan) -> float:
        raise ValueError("nothing priced")

    with pytest.raises(ValueError, match="baseline"):
        price_space(space, broken)


def test_tuning_shortlist_spreads_over_piece_counts_and_families():
    ch2, ch16 = Plan(strategy="chunked", chunks=2), Plan(strategy="chunked", chunks=16)
    ring2 = RING.with_(chunks=2)
    fused = Plan(strategy="tile_fused", chunks=4, transport="copy_engine")
    ranked = [CH8, ch16, CH4, RING, ring2, SEQ, ch2, fused]  # best predicted first
    from hocket.plan.search import tuning_shortlist

    # best, it with half and a quarter of its pieces, then the best of each other family
    assert tuning_shortlist(ranked, baseline=SEQ, k=4) == (CH8, CH4, ch2, RING)
    assert tuning_shortlist(ranked, baseline=SEQ, k=5) == (CH8, CH4, ch2, RING, fused)
    assert set(tuning_shortlist(ranked, baseline=SEQ, k=20)) == set(ranked) - {SEQ}
    assert tuning_shortlist([SEQ], baseline=SEQ, k=3) == ()
    with pytest.raises(ValueError, match="k=-1"):
        tuning_shortlist(ranked, baseline=SEQ, k=-1)


def test_tuning_shortlist_gives_every_class_a_measurement_before_variants():
    # comm_sms and order variants of the best plan are families of their own; they come after the best
    # plan of each strategy x transport class, so a class predicted well down the list is still timed
    from hocket.plan.search import tuning_shortlist
    best = Plan(strategy="chunked", chunks=2, order="local_first")
    variants = [best.with_(comm_sms=c) for c in (8, 16, 32)] + [best.with_(order="reverse")]
    pipe = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    relay = Plan(strategy="chunked", chunks=2, transport="host_staged")
    ranked = [best, *variants, relay, RING, pipe, SEQ]
    assert tuning_shortlist(ranked, baseline=SEQ, k=4) == (best, relay, RING, pipe)
    assert tuning_shortlist(ranked, baseline=SEQ, k=5)[4] == variants[0]


def test_steady_state_config_prices_the_loop_and_can_change_the_choice():
    # the search prices what SearchConfig asks for: with steady_state the host's issue waits leave the
    # device's critical path (a loop runs the host ahead), so a pipeline whose saving was eaten by its host
    # orchestration (the copy-engine peer pipe's begin, flag waits and end) can win only there
    from hocket.hardware import load_preset
    from hocket.hardware.profile import CalibrationProfile, ContentionPoint
    from hocket.strategies import predict

    cluster = load_preset("h200x2")
    mild = CalibrationProfile(fingerprint="x", contention={"copy_engine": ContentionPoint(gemm_slowdown=1.0,
                                                                                         transfer_slowdown=1.5)})
    site = Site(kind="ag_mm", m=8192, k=8192, n=7168, world=2)
    cold = search(site, cluster, profile=mild)
    steady = search(site, cluster, profile=mild, config=SearchConfig(steady_state=True))
    cold_ms = {s.plan: s.predicted_ms for s in cold.ranked}
    for scored in random.Random().sample(steady.ranked, 12):
        assert scored.predicted_ms == predict(site, scored.plan, cluster, mild, steady_state=True).total_ms
    pipe = Plan(strategy="chunked", chunks=1, transport="copy_engine")
    assert cold_ms[pipe] / cold.sequential_ms > next(s.predicted_ms for s in steady.ranked if s.plan == pipe) \
        / steady.sequential_ms
    with pytest.raises(TypeError, match="steady_state"):
        SearchConfig(steady_state="yes")


def test_tuning_shortlist_times_the_own_data_first_relay_pipeline_apart():
    # over host_staged the own-data-first pipeline (one relay call) and the per-piece one are classes apart
    from hocket.plan.search import tuning_shortlist
    natural = [Plan(strategy="chunked", chunks=c, transport="host_staged") for c in (16, 8, 32)]
    own_first = Plan(strategy="chunked", chunks=8, transport="host_staged", order="local_first")
    bulk = Plan(strategy="bulk", transport="host_staged")
    ranked = [*natural, bulk, own_first, SEQ]
    assert tuning_shortlist(ranked, baseline=SEQ, k=4) == (natural[0], natural[1], bulk, own_first)
