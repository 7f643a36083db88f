"""Bad inputs raise on every rank with a clear error and leave the group usable (no rank hangs)."""

from __future__ import annotations

import pytest

from _ops_errors import (
    bad_everywhere,
    bad_on_one_rank,
    disagree,
    diverge_after_first_call,
    healthy,
    planners_disagree,
)

BAD = {
    "k_mismatch": (ValueError, r"Bs\[0\] has shape \(7, 3\)"),
    "k_gather_mismatch": (ValueError, r"gathering the last dim"),
    "scatter_not_divisible": (ValueError, r"not divisible by the group size"),
    "dtype_mismatch": (ValueError, r"B.dtype=torch.bfloat16 differs"),
    "empty_bs": (ValueError, r"Bs is empty"),
    "unknown_strategy": (ValueError, r"strategy='warp'"),
    "chunks_zero": (ValueError, r"chunks=0"),
    "unsupported_pair": (ValueError, r"'substituted' is not available for all_gather_matmul"),
    "bad_reduce_op": (ValueError, r"reduce_op='max'"),
    "bad_dim": (ValueError, r"gather_dim=5"),
    "unknown_group": (ValueError, r"no-such-group"),
}


@pytest.mark.parametrize("which", sorted(BAD))
def test_same_bad_input_everywhere(pool, which):
    exc, match = BAD[which]
    pool.run_expect_error(bad_everywhere, which, exc_type=exc, match=match)
    assert all(pool.run(healthy, 3))


@pytest.mark.parametrize("which", sorted(set(BAD) - {"unknown_group"}))
def test_bad_input_on_one_rank_raises_everywhere(pool, which):
    exc, match = BAD[which]
    bad = pool.world_size - 1
    failures = pool.run_expect_error(bad_on_one_rank, which, bad, exc_type=exc, match=match)
    for rank, failure in enumerate(failures):
        if rank != bad:
            assert failure.exc_type.endswith("RankInputError") and f"[{bad}]" in failure.message
    assert all(pool.run(healthy, 4))


@pytest.mark.parametrize("which, field", [("k", r"site\.k=16"), ("dtype", r"site\.dtype='float64'"),
                                          ("plan", r"plan\.strategy='ring'"), ("return_A", r"flags\.return_A"),
                                          ("reduce_op", r"flags\.reduce_op='avg'"),
                                          ("disable", r"plan\.strategy='sequential'")])
def test_disagreeing_ranks_get_the_same_error(pool, which, field):
    odd = 1
    failures = pool.run_expect_error(disagree, which, odd, exc_type=ValueError, match=f"rank {odd} has {field}")
    messages = {f.message for f in failures}
    assert len(messages) == 1 and all(f.exc_type.endswith("AgreementError") for f in failures)
    assert all(pool.run(healthy, 5))


def test_divergence_after_the_first_call_is_caught_in_always_mode(pool2):
    pool2.run_expect_error(diverge_after_first_call, 1, exc_type=ValueError, match=r"rank 1 has site\.k=12")
    assert all(pool2.run(healthy, 6))


def test_plan_left_to_hocket_is_rank_zeros_choice_everywhere(pool):
    assert pool.run(planners_disagree) == [["ring(1)"]] * pool.world_size
