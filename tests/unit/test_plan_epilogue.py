"""hocket.cost.epilogue: where the pull executor cuts its own block into plain rows (multiplied first)
and fused rows (their peers' partials added by the GEMM's epilogue). Checked against a brute-force walk
over every cut, on random blocks and rates."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.cost.epilogue import (
    DEFAULT_GBPS,
    DEFAULT_TFLOPS,
    EPILOGUE_ALIGN,
    EPILOGUE_MARGIN,
    MIN_FUSED_BYTES,
    MIN_FUSED_ROWS,
    cluster_rates,
    epilogue_split,
    waves,
)
from hocket.hardware import load_preset


def _covers(plain: int, fused: int, k: int, sources: int, itemsize: int, tflops: float, gbps: float) -> bool:
    """The plain GEMM lasts at least ``margin`` times the fused rows' transfer at the nominal rates."""
    gemm_s = 2.0 * plain * k / (tflops * 1e12)
    copy_s = sources * fused * itemsize / (gbps * 1e9)
    return gemm_s >= EPILOGUE_MARGIN * copy_s * (1 - 1e-9)


def _brute(rows, k, cols, sources, itemsize, tflops, gbps, sms):
    """The fewest aligned plain rows that cover the transfer and add no wave, by trying every cut."""
    for plain in range(EPILOGUE_ALIGN, rows, EPILOGUE_ALIGN):
        fused = rows - plain
        if fused < MIN_FUSED_ROWS or fused * cols * itemsize < MIN_FUSED_BYTES:
            break
        if not _covers(plain, fused, k, sources, itemsize, tflops, gbps):
            continue
        if sms is not None and waves(plain, cols, sms) + waves(fused, cols, sms) > waves(rows, cols, sms):
            continue
        return plain, fused
    return rows, 0


@settings(max_examples=300, deadline=None)
@given(rows=st.integers(1, 12000), k=st.integers(16, 65536), cols=st.integers(1, 30000), sources=st.integers(1, 7),
       itemsize=st.sampled_from([1, 2, 4]), tflops=st.floats(10, 3000), gbps=st.floats(5, 1000),
       sms=st.one_of(st.none(), st.integers(1, 200)))
def test_the_cut_is_the_first_that_covers_the_transfer_and_adds_no_wave(rows, k, cols, sources, itemsize, tflops,
                                                                        gbps, sms):
    plain, fused = epilogue_split(rows, k, cols, sources=sources, itemsize=itemsize, tflops=tflops, gbps=gbps, sms=sms)
    assert plain + fused == rows and plain >= 1 and fused >= 0
    assert (plain, fused) == _brute(rows, k, cols, sources, itemsize, tflops, gbps, sms)
    if fused:
        assert fused >= MIN_FUSED_ROWS and fused * cols * itemsize >= MIN_FUSED_BYTES and plain % EPILOGUE_ALIGN == 0
        assert _covers(plain, fused, k, sources, itemsize, tflops, gbps)


def test_the_large_h200_blocks_are_cut_where_no_wave_is_added():
    # mm_rs 8192x14336x8192 on 2 ranks: the rates alone would cut at 768 rows, which costs a wave (2 + 7 > 8)
    rows, k, cols = 4096, 14336, 8192
    rate_only, _ = epilogue_split(rows, k, cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0)
    plain, fused = epilogue_split(rows, k, cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0, sms=132)
    assert waves(rate_only, cols, 132) + waves(rows - rate_only, cols, 132) > waves(rows, cols, 132)
    assert plain > rate_only and fused > 0
    assert waves(plain, cols, 132) + waves(fused, cols, 132) == waves(rows, cols, 132)


def test_small_partials_are_summed_in_a_pass():
    # mm_rs 8192x2048x4096 on 2 ranks: a valid cut would fuse 1024 rows, 8 MiB of partials; not worth a launch
    rows, k, cols = 4096, 2048, 4096
    assert epilogue_split(rows, k, cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0, sms=132) == (rows, 0)
    plain, fused = epilogue_split(rows, k, cols, sources=1, itemsize=2, tflops=989.0, gbps=450.0, sms=132,
                                  min_fused_bytes=0)
    assert fused > 0 and fused * cols * 2 < MIN_FUSED_BYTES


def test_a_transfer_longer_than_the_block_gemm_leaves_the_block_plain():
    # 8 peers over PCIe with a short k: no cut lets the plain GEMM cover the fused rows' transfer
    assert epilogue_split(4096, 256, 4096, sources=7, itemsize=2, tflops=989.0, gbps=25.0) == (4096, 0)
    assert epilogue_split(MIN_FUSED_ROWS, 65536, 8192, sources=1, itemsize=2, tflops=989.0, gbps=450.0) == \
        (MIN_FUSED_ROWS, 0)


def test_more_sources_or_slower_links_keep_more_rows_plain():
    cut = {(s, g): epilogue_split(8192, 8192, 8192, sources=s, itemsize=2, tflops=989.0, gbps=g)[0]
           for s in (1, 3) for g in (450.0, 100.0)}
    assert cut[(1, 450.0)] <= cut[(3, 450.0)] and cut[(1, 450.0)] <= cut[(1, 100.0)]
    assert cut[(1, 450.0)] < cut[(3, 100.0)]


@pytest.mark.parametrize("name,kwargs", [
    ("rows", {"rows": 0}), ("k", {"k": -4}), ("cols", {"cols": 1.5}), ("sources", {"sources": 0}),
    ("itemsize", {"itemsize": True}), ("tflops", {"tflops": 0.0}), ("gbps", {"gbps": math.nan}),
    ("sms", {"sms": 0}), ("margin", {"margin": -1.0}), ("align", {"align": 0}),
])
def test_bad_arguments_are_named(name, kwargs):
    args = {"rows": 4096, "k": 8192, "cols": 8192, "sources": 1, "itemsize": 2, "tflops": 989.0, "gbps": 450.0}
    args.update(kwargs)
    rows, k, cols = args.pop("rows"), args.pop("k"), args.pop("cols")
    with pytest.raises(ValueError, match=name):
        epilogue_split(rows, k, cols, **args)


def test_cluster_rates_read_the_device_peak_and_the_slowest_link():
    cluster = load_preset("h200x2")
    tflops, gbps = cluster_rates(cluster, 0, (0, 1), "bfloat16")
    assert tflops == cluster.device(0).peak("bfloat16")
    assert gbps == cluster.link(0, 1).gbps_per_direction
    assert cluster_rates(cluster, 5, (5, 6), "bfloat16") == (DEFAULT_TFLOPS, DEFAULT_GBPS)  # not in the cluster
    assert cluster_rates(cluster, 0, (0,), "float8_e5m2")[1] == DEFAULT_GBPS  # no peer: the default link


def test_the_shared_own_block_split_is_the_epilogue_split_with_default_rates():
    from hocket.strategies.pieces import own_block_split

    rng = random.Random()
    rows, k = rng.choice([2048, 4096, 8192]), rng.choice([4096, 14336])
    args = dict(sources=rng.choice([1, 3, 7]), itemsize=2, sms=132)
    tflops, gbps = rng.uniform(300.0, 1000.0), rng.uniform(100.0, 500.0)
    assert own_block_split(rows, k, 8192, tflops=tflops, gbps=gbps, **args) == epilogue_split(
        rows, k, 8192, tflops=tflops, gbps=gbps, **args)
    assert own_block_split(rows, k, 8192, tflops=None, gbps=None, **args) == epilogue_split(
        rows, k, 8192, tflops=DEFAULT_TFLOPS, gbps=DEFAULT_GBPS, **args)
