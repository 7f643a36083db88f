"""Plan: validation, JSON round trip, hashing."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.core.plan import (
    HIERARCHIES,
    ORDERS,
    PLAN_VERSION,
    STRATEGIES,
    SUBSTITUTES,
    TRANSPORTS,
    Plan,
    as_plan,
)

plans = st.builds(
    Plan,
    strategy=st.sampled_from(STRATEGIES),
    chunks=st.integers(1, 64),
    order=st.sampled_from(ORDERS),
    transport=st.sampled_from(TRANSPORTS),
    comm_sms=st.none() | st.integers(1, 132),
    substitute=st.sampled_from(SUBSTITUTES),
    hierarchy=st.sampled_from(HIERARCHIES),
    split_sizes=st.none() | st.lists(st.integers(0, 4096), min_size=1, max_size=8).map(tuple),
)


@given(plans)
def test_json_round_trip_is_identity(plan):
    text = plan.to_json()
    assert Plan.from_json(text) == plan
    assert Plan.from_dict(json.loads(text)) == plan
    assert as_plan(text) == plan


@given(plans, plans)
def test_hash_distinguishes_plans(a, b):
    assert (a.hash == b.hash) == (a == b)


@pytest.mark.parametrize(
    "kwargs, needle",
    [
        ({"strategy": "fastest"}, "Plan.strategy"),
        ({"chunks": 0}, "Plan.chunks"),
        ({"chunks": -3}, "Plan.chunks"),
        ({"chunks": 2.5}, "Plan.chunks"),
        ({"transport": "smoke_signals"}, "Plan.transport"),
        ({"order": "random"}, "Plan.order"),
        ({"comm_sms": 0}, "Plan.comm_sms"),
        ({"substitute": "ag_rs"}, "Plan.substitute"),
        ({"split_sizes": ()}, "Plan.split_sizes"),
        ({"split_sizes": (4, -1)}, "Plan.split_sizes"),
        ({"version": PLAN_VERSION + 1}, "Plan.version"),
    ],
)
def test_invalid_fields_name_the_field(kwargs, needle):
    with pytest.raises(ValueError, match=needle.replace(".", r"\.")):
        Plan(**kwargs)


def test_unknown_json_field_is_named():
    with pytest.raises(ValueError, match="bogus"):
        Plan.from_json('{"strategy": "ring", "bogus": 1}')


def test_malformed_json_says_what_was_expected():
    with pytest.raises(ValueError, match="could not be parsed"):
        Plan.from_json("{strategy: ring")


def test_as_plan_accepts_strategy_names_and_rejects_other_types():
    assert as_plan("ring") == Plan(strategy="ring")
    assert as_plan(None) is None
    with pytest.raises(TypeError, match="plan="):
        as_plan(3)


def test_plan_is_frozen():
    plan = Plan()
    with pytest.raises(AttributeError):
        plan.chunks = 4  # type: ignore[misc]


def test_the_peer_protocol_is_a_plan_field_left_out_of_the_json_when_unset():
    import json

    from hocket.core.plan import Plan as P

    plain = P(strategy="chunked", chunks=1, transport="copy_engine")
    assert "protocol" not in json.loads(plain.to_json())  # plans without one keep their JSON and hash
    assert P.from_json(plain.to_json()) == plain and P.from_dict({**plain.to_dict(), "protocol": None}) == plain
    pulled = plain.with_(protocol="pull")
    assert json.loads(pulled.to_json())["protocol"] == "pull" and P.from_json(pulled.to_json()) == pulled
    assert pulled.hash != plain.hash and pulled.describe() == "chunked(1)/copy_engine:pull"
    with pytest.raises(ValueError, match="Plan.protocol='sideways'"):
        P(strategy="chunked", transport="copy_engine", protocol="sideways")
    with pytest.raises(ValueError, match="applies to strategy='chunked' over transport='copy_engine'"):
        P(strategy="ring", transport="p2p", protocol="push")
