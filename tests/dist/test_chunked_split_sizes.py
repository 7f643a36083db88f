"""The chunked executors cut uneven pieces from ``Plan.split_sizes`` (small first / last piece)
and still match the reference; sizes that do not cover the split rows are refused."""

from __future__ import annotations

import random

import pytest

from _ops_cases import run_case


def _case(kind: str, rows: int, sizes: list[int], world: int, seed: int) -> dict:
    # ag_mm splits each shard's rows, mm_rs each destination block's, mm_ar all rows
    m = rows * world if kind == "mm_rs" else rows
    case = dict(kind=kind, strategy="chunked", chunks=len(sizes), split_sizes=sizes, shape=[m, 24], dim=0,
                ns=[16], dtype="float32", seed=seed)
    if kind != "ag_mm":
        case["reduce_op"] = "sum"
    return case


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs", "mm_ar"])
@pytest.mark.parametrize("sizes", [[8, 24, 24], [24, 24, 8], [8, 20, 20, 8], [3, 53]])
def test_uneven_pieces_match_the_reference(pool2, kind, sizes):
    seed = random.randrange(2**30)
    results = pool2.run(run_case, _case(kind, sum(sizes), sizes, pool2.world_size, seed))
    assert all(len(r) == len(results[0]) > 0 for r in results)


def test_sizes_that_miss_rows_are_refused(pool2):
    case = _case("ag_mm", 56, [8, 24, 24], pool2.world_size, 1)
    case["shape"] = [60, 24]  # 60 shard rows, sizes cover 56
    pool2.run_expect_error(run_case, case, exc_type=ValueError, match="split_sizes")
