"""torchtitan 0.3's expert-parallel MoE as hocket's client, on real gloo ranks at world 2.

Eager: hocket's drop-in for ``RoutedExperts`` (dispatch + ``GroupedExperts``) against torchtitan's own path,
forward and every gradient, over routings (uniform, every token on expert 0, no token leaving its rank) and
strategies. Compiled (split sizes traced, ``capture_scalar_outputs``): ``hocket.compile`` of torchtitan's module
rewrites each layer into ``hocket.ops.moe_experts``'s traced ops, compiled with the rest of the graph in one piece
(or, sequential, leaves it and fills the all-to-all gaps) and computes what torchtitan computes, two steps of
different routing; without
``capture_scalar_outputs`` the split sizes' ``.tolist()`` makes Dynamo run the layer eagerly (torchtitan's own
result, nothing for the pass to see) and ``compile_moe`` traces it. Each compile takes 10-30 s on CPU, so compiled
cases are few.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("torchtitan.models.common.moe", reason="torchtitan 0.3 is not installed")

from _torchtitan_cases import (  # noqa: E402
    MoeCase,
    compiled_matches_torchtitan,
    eager_matches_torchtitan,
    graph_break_left_alone,
)

COMPILE_TIMEOUT_S = 200.0
STRATEGIES = (None, "sequential", "token_blocks", "per_source", "expert_groups", "shared_overlap")


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), skew=st.sampled_from(["uniform", "one", "local"]), topk=st.sampled_from([1, 2]),
       strategy=st.sampled_from(STRATEGIES), tokens=st.sampled_from([1, 5, 8]))
def test_drop_in_matches_torchtitan_forward_and_backward(pool2, seed, skew, topk, strategy, tokens):
    case = MoeCase(seed=seed, skew=skew, topk=topk, strategy=strategy, tokens=tokens)
    errors = pool2.run(eager_matches_torchtitan, case)
    assert set(errors[0]) >= {"out", "x.grad", "scores.grad", "inner_experts.w1_EFD.grad",
                              "inner_experts.w2_EDF.grad", "inner_experts.w3_EFD.grad"}


def test_drop_in_matches_torchtitan_at_world_4(pool4):
    """Correctness only (world 4 on 2 cores): one expert per rank, every token's first choice on expert 0."""
    errors = pool4.run(eager_matches_torchtitan, MoeCase(seed=11, experts=4, skew="one", strategy="per_source"))
    assert len(errors) == 4 and all("out" in e for e in errors)


def test_use_hocket_experts_in_a_full_moe_layer(pool2):
    """Router, routed experts (swapped in place) and the shared expert: gradients of every parameter agree."""
    errors = pool2.run(eager_matches_torchtitan, MoeCase(seed=3, shared=True, strategy="shared_overlap"))
    assert "router.gate.weight.grad" in errors[0] and "shared_experts.w1.weight.grad" in errors[0]


def test_compile_rewrites_two_layers_into_one_compiled_graph(pool2):
    results = pool2.run(compiled_matches_torchtitan, MoeCase(seed=5, shared=True, strategy="token_blocks", layers=2),
                        timeout_s=COMPILE_TIMEOUT_S)
    for result in results:
        assert len(result["moe"]) == 2, result["text"]
        for layer in result["moe"]:
            assert layer["rewritten"], result["text"]
            assert layer["plan"]["strategy"] == "token_blocks"
            assert {s["kind"] for s in layer["sites"]} == {"a2a_mm", "mm_a2a"}
            assert layer["sites"][0]["experts"] == 4 and layer["sites"][0]["topk"] == 2
        assert not [g for g in result["gaps"] if g["collective"] == "all_to_all_single"]  # no raw all-to-all left
        assert "MoE layers: 2, 2 rewritten" in result["text"]
        # one Dynamo graph, both layers inside it, compiled in one piece: one forward and one backward graph
        assert sorted(result["graphs"]) == ["backward#0", "forward#0", "moe#0"], result["graphs"]
        trace = result["trace"]  # the second step, as hocket's transport recorded it
        assert not [e for e in trace if e[0] == "shared"]  # the shared expert runs in the graph, after the call
        firsts = [i for i, e in enumerate(trace) if e == ("issue", "dispatch:0")]
        assert len(firsts) == 4, trace  # per layer: the forward dispatch and mm_a2a's backward
        for at in firsts:  # token blocks: block 1's dispatch issued before block 0's GEMM
            assert trace[at + 1] == ("issue", "dispatch:1"), trace


def test_compile_sequential_leaves_the_layer_and_fills_its_gaps(pool2):
    results = pool2.run(compiled_matches_torchtitan, MoeCase(seed=6, shared=True, strategy="sequential"),
                        timeout_s=COMPILE_TIMEOUT_S)
    for result in results:
        (layer,) = result["moe"]
        assert not layer["rewritten"] and "sequential chosen" in layer["reason"]
        assert max(result["errors"].values()) == 0.0  # reordering never changes what is computed
        filled = [g for g in result["gaps"] if g["collective"] == "all_to_all_single" and g["matmuls_in_gap"]]
        assert filled and all(g["comm_ms"] is not None for g in filled), result["text"]
        forward = [g for g in filled if g["graph"].startswith("forward")]
        assert forward, "the shared expert's matmuls moved into a forward all-to-all's gap"


def test_compile_with_the_planners_choice_fixes_the_plan_when_compiling(pool2):
    results = pool2.run(compiled_matches_torchtitan, MoeCase(seed=8, skew="one"), timeout_s=COMPILE_TIMEOUT_S)
    for result in results:
        (layer,) = result["moe"]
        assert layer["rewritten"] and layer["source"] == "predicted", result["text"]
        assert "plan chosen for uniform routing when compiling" in layer["note"]


def test_graph_break_runs_torchtitan_and_compile_moe_traces_the_split_sizes(pool2):
    results = pool2.run(graph_break_left_alone, MoeCase(seed=7, strategy="token_blocks"), timeout_s=COMPILE_TIMEOUT_S)
    for result in results:
        assert result["compile"] == []  # the layer ran eagerly inside torchtitan: no graph held it
        (layer,) = result["compile_moe"]
        assert layer["rewritten"]
