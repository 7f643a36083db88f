"""``hocket.ops.moe_experts`` against the single-process reference of the whole layer: forward and the gradients
of tokens, expert weights and routing weights, every strategy x splits mode x transport, hypothesis-drawn
routing (uniform, Zipf-skewed, one expert, empty experts, ranks without tokens), k in 1, 2, 8, fp32 and bf16."""

from __future__ import annotations

import pytest
from _moe_cases import MoeCase, all_plans, check_against_reference
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ROUTINGS = ("uniform", "zipf", "one_expert", "sparse")


@st.composite
def moe_cases(draw, world: int, *, dtype: str | None = None):
    topk = draw(st.sampled_from([1, 2, 8]))
    least = max(1, -(-topk // world))  # E = e_local * world >= k
    e_local = draw(st.integers(least, max(least, 4)))
    tokens = tuple(draw(st.integers(0, 9)) for _ in range(world))
    return MoeCase(seed=draw(st.integers(0, 2**31 - 1)), tokens=tokens, e_local=e_local, topk=topk,
                   routing=draw(st.sampled_from(ROUTINGS)), dtype=dtype or draw(st.sampled_from(["float32", "bfloat16"])),
                   hidden=draw(st.sampled_from([8, 16, 12])), ffn=draw(st.sampled_from([8, 4, 12])),
                   shared=draw(st.booleans()))  # widths of 12 (and bf16's 4) miss 16-byte rows: the mm loop


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_plan_matches_reference_world2(pool2, data):
    case = data.draw(moe_cases(2))
    assert pool2.run(check_against_reference, case) == [len(all_plans())] * 2


@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_every_plan_matches_reference_world4(pool4, data):
    case = data.draw(moe_cases(4))
    assert pool4.run(check_against_reference, case, timeout_s=120) == [len(all_plans())] * 4


@pytest.mark.parametrize("routing", ["one_expert", "sparse"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_edge_routing_and_empty_rank(pool2, routing, dtype):
    case = MoeCase(seed=11, tokens=(0, 7), e_local=3, topk=2, routing=routing, dtype=dtype, shared=True)
    assert pool2.run(check_against_reference, case) == [len(all_plans())] * 2


def test_plan_none_chooses_and_matches(pool2):
    case = MoeCase(seed=3, tokens=(5, 6), e_local=2, topk=2, routing="zipf", plans=(None, None))
    assert pool2.run(check_against_reference, case) == [2, 2]


@pytest.mark.parametrize("transport", ["collective", "host_staged"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_transport_all_to_all(pool2, transport, seed):
    from _moe_cases import all_to_all_rows

    assert all(pool2.run(all_to_all_rows, transport, seed))
