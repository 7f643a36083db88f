"""hocket.kernels.split_k: the slice rule (plain Python) and the kernels' numerics under Triton's
interpreter (a child process, as in test_kernels_interpret.py): every element written, the
accumulator left zero, several accumulates into one product before it is finished."""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path

import pytest
import torch

from _interpret import assert_matches_reference, run_interpreted
from hocket.kernels.split_k import MIN_SLICE_K, split_count, slice_k

SHAPES = [(128, 512, 128), (100, 300, 70), (130, 1000, 140)]  # even; uneven everywhere; two tiles per dim


def test_a_thin_product_with_long_k_is_cut_until_the_sms_are_covered():
    # 128 x 7168 output = 56 tiles of 128x128: 3 slices put 168 programs on 132 SMs
    assert split_count(128, 7168, 8192, 132) == 3
    assert split_count(128, 1792, 8192, 132) == 10  # 14 tiles
    assert split_count(8192, 8192, 8192, 132) == 1  # already thousands of tiles


def test_slices_never_go_below_the_minimum_length():
    assert split_count(128, 128, 1024, 132) == 1024 // MIN_SLICE_K
    assert split_count(128, 128, 100, 132) == 1


def test_slice_length_is_a_block_multiple_that_covers_k():
    for k in (64, 100, 1000, 8192, 7000):
        for splits in (1, 2, 3, 7):
            length = slice_k(k, splits)
            assert length % 64 == 0 and length * splits >= k and -(-k // length) <= splits


@pytest.mark.parametrize("bad", [0, -3, 2.5, True])
def test_bad_dimensions_are_named(bad):
    with pytest.raises(ValueError, match=r"k=.*must be a positive int"):
        split_count(128, 128, bad, 132)


def _cases(rng: random.Random) -> list[dict]:
    cases = []
    for dtype in ("float32", "bfloat16"):
        for m, k, n in SHAPES:
            cases.append(dict(dtype=dtype, m=m, k=k, n=n, seed=rng.getrandbits(31), splits=rng.randint(1, 5),
                              blocks=rng.choice([1, 2, 3])))
    return cases


def _child(cases_path: str, out_path: str) -> None:
    from hocket.kernels.split_k import accumulate, finish

    results = []
    for case in json.loads(Path(cases_path).read_text()):
        dtype = getattr(torch, case["dtype"])
        gen = torch.Generator().manual_seed(case["seed"])
        a = torch.randn(case["m"], case["k"], generator=gen).to(dtype)
        b = torch.randn(case["k"], case["n"], generator=gen).to(dtype)
        out = torch.full((case["m"], case["n"]), float("nan"), dtype=dtype)
        acc = torch.zeros(case["m"], case["n"], dtype=torch.float32)
        cuts = [round(case["k"] * i / case["blocks"]) for i in range(case["blocks"] + 1)]
        for k0, k1 in zip(cuts, cuts[1:]):  # k blocks arriving one after another
            accumulate(a[:, k0:k1], b[k0:k1], acc, splits=case["splits"])
        finish(acc, out)
        results.append(dict(case=case, a=a, b=b, out=out, acc_left=acc.clone()))
    torch.save(results, out_path)


@pytest.fixture(scope="module")
def results(tmp_path_factory):
    return run_interpreted(__file__, _cases(random.Random()), tmp_path_factory.mktemp("split_k"))


@pytest.mark.timeout(300)
def test_split_k_matches_the_reference_and_leaves_the_accumulator_zero(results):
    assert len(results) == 2 * len(SHAPES)
    for record in results:
        assert_matches_reference(record)
        assert not record["acc_left"].any(), f"accumulator not zeroed after finish in {record['case']}"


if __name__ == "__main__":
    _child(sys.argv[1], sys.argv[2])
