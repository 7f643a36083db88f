"""Shape bucketing: a new sequence length reuses a decision; plans fit the real shape."""

from __future__ import annotations

import random

import pytest

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.bucket import BucketPolicy, bucket_m, bucket_site, fit_plan
from hocket.plan.space import split_rows

POLICIES = [BucketPolicy(), BucketPolicy(mode="pow2"), BucketPolicy(mode="multiple", multiple=384),
            BucketPolicy(mode="exact")]


@pytest.mark.parametrize("policy", POLICIES, ids=lambda p: f"{p.mode}-{p.multiple}")
def test_bucket_rounds_up_to_a_multiple_of_world_and_is_idempotent_and_monotone(policy):
    rng = random.Random()
    for _ in range(300):
        world = rng.choice([1, 2, 3, 4, 8, 6])
        m = rng.randint(1, 200_000)
        b = bucket_m(m, world, policy)
        assert b >= m and b % world == 0
        assert bucket_m(b, world, policy) == b
        assert bucket_m(m + rng.randint(0, 50), world, policy) >= b


def test_default_policy_values():
    assert bucket_m(8000, 8) == 8192
    assert bucket_m(8193, 8) == 8448
    assert bucket_m(100, 1) == 128
    assert bucket_m(257, 2) == 512
    assert bucket_m(8000, 8, BucketPolicy(mode="pow2")) == 8192
    assert bucket_m(8193, 8, BucketPolicy(mode="pow2")) == 16384
    assert bucket_m(8193, 8, BucketPolicy(mode="exact")) == 8200  # rounded to the world size only


def test_nearby_sequence_lengths_share_one_site_key():
    base = dict(kind="ag_mm", k=8192, n=3584, world=8, dtype="bf16")
    keys = {bucket_site(Site(m=m, **base)).key for m in range(7944, 8193, 8)}
    assert len(keys) == 1
    assert bucket_site(Site(m=8192, **base)) == Site(m=8192, **base)
    bucketed = bucket_site(Site(m=6000, name="qkv", count=80, **base))
    assert (bucketed.m, bucketed.k, bucketed.n, bucketed.name, bucketed.count) == (6144, 8192, 3584, "qkv", 80)
    assert bucket_site(Site(m=8448, **base)).key != bucket_site(Site(m=8192, **base)).key


def test_fit_plan_caps_chunks_to_the_real_rows():
    small = Site(kind="ag_mm", m=8 * 6, k=64, n=64, world=8)  # 6 rows per shard
    plan = Plan(strategy="ring", chunks=16, transport="p2p")
    fitted = fit_plan(plan, small)
    assert fitted.chunks == split_rows(small, "ring") == 6
    assert fitted.with_(chunks=16) == plan
    assert fit_plan(Plan(strategy="chunked", chunks=4), small) == Plan(strategy="chunked", chunks=4)


def test_fit_plan_rescales_split_sizes():
    site = Site(kind="mm_ar", m=1000, k=64, n=64, world=2)
    plan = Plan(strategy="chunked", chunks=2, split_sizes=(1536, 512))
    fitted = fit_plan(plan, site)
    assert sum(fitted.split_sizes) == 1000 and fitted.split_sizes == (750, 250)


@pytest.mark.parametrize("kwargs,match", [
    (dict(m=0), "m=0"), (dict(m=5, world=0), "world=0"), (dict(m=2.5), "m=2.5"),
])
def test_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bucket_m(**kwargs)


def test_bad_policy():
    with pytest.raises(ValueError, match="mode"):
        BucketPolicy(mode="log")
    with pytest.raises(ValueError, match="multiple"):
        BucketPolicy(multiple=0)
