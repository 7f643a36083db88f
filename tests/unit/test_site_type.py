"""Site: validation, shape convention, keys and backward sites."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from hocket.core.site import SITE_KINDS, Site, canonical_dtype

sites = st.builds(
    Site,
    kind=st.sampled_from(("ag_mm", "mm_rs", "mm_ar")),
    m=st.integers(1, 1 << 16), k=st.integers(1, 1 << 15), n=st.integers(1, 1 << 15),
    dtype=st.sampled_from(("bf16", "float32", "fp16")),
    world=st.integers(1, 64),
    num_b=st.integers(1, 3),
    direction=st.sampled_from(("forward", "backward")),
)


@given(sites)
def test_dict_round_trip_and_key_stability(site):
    again = Site.from_dict(site.to_dict())
    assert again == site
    assert again.key == site.key


@given(sites, sites)
def test_key_differs_when_shapes_differ(a, b):
    same_identity = (a.kind, a.m, a.k, a.n, a.dtype, a.world, a.num_b, a.direction) == (
        b.kind, b.m, b.k, b.n, b.dtype, b.world, b.num_b, b.direction)
    assert (a.key == b.key) == same_identity


def test_count_and_name_do_not_change_the_key():
    a = Site(kind="ag_mm", m=8192, k=8192, n=7168, count=1, name="qkv")
    b = Site(kind="ag_mm", m=8192, k=8192, n=7168, count=80, name="layer3.qkv")
    assert a.key == b.key


def test_flops_and_bytes_follow_the_shape_convention():
    ag = Site(kind="ag_mm", m=8192, k=4096, n=1024, dtype="bf16", world=4, num_b=2)
    assert ag.flops == 2 * 8192 * 4096 * 1024 * 2
    assert ag.comm_bytes == 8192 * 4096 * 2  # the gathered A
    rs = Site(kind="mm_rs", m=8192, k=4096, n=1024, dtype="float32", world=4)
    assert rs.comm_bytes == 8192 * 1024 * 4  # the un-scattered output


def test_backward_sites_swap_k_and_n():
    (bwd,) = Site(kind="ag_mm", m=4096, k=8192, n=1024, world=8).backward_sites()
    assert (bwd.kind, bwd.m, bwd.k, bwd.n, bwd.direction) == ("mm_rs", 4096, 1024, 8192, "backward")
    (bwd,) = Site(kind="mm_rs", m=4096, k=1024, n=8192, world=8).backward_sites()
    assert (bwd.kind, bwd.m, bwd.k, bwd.n) == ("ag_mm", 4096, 8192, 1024)
    assert Site(kind="mm_ar", m=64, k=64, n=64).backward_sites() == ()
    (bwd,) = Site(kind="ag_mm", m=4096, k=8192, n=1024, world=8, num_b=2).backward_sites()
    assert (bwd.kind, bwd.k, bwd.n, bwd.num_b) == ("mm_rs", 2048, 8192, 1)


@pytest.mark.parametrize("field, value", [("m", 0), ("k", -1), ("n", 1.5), ("world", 0), ("count", 0)])
def test_bad_sizes_name_the_field(field, value):
    kwargs = dict(kind="ag_mm", m=8, k=8, n=8)
    kwargs[field] = value
    with pytest.raises(ValueError, match=f"Site.{field}"):
        Site(**kwargs)


def test_bad_kind_dtype_ranks():
    with pytest.raises(ValueError, match="Site.kind"):
        Site(kind="gemm", m=1, k=1, n=1)
    with pytest.raises(ValueError, match="dtype"):
        Site(kind="ag_mm", m=1, k=1, n=1, dtype="int4")
    with pytest.raises(ValueError, match="Site.ranks"):
        Site(kind="ag_mm", m=1, k=1, n=1, world=4, ranks=(0, 1))
    assert set(SITE_KINDS) >= {"ag_mm", "mm_rs", "mm_ar"}


def test_torch_dtypes_are_canonicalised():
    torch = pytest.importorskip("torch")
    assert canonical_dtype(torch.bfloat16) == "bfloat16"
    assert canonical_dtype(torch.float32) == "float32"
