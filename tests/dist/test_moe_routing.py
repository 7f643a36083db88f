"""The MoE routing exchange: one all-gather per agreed call, safe when expert counts change, a late change on one
rank caught on every rank, and the CUDA-graph capture branch with no host read (run on CPU with the branch
forced; tests/gpu/test_moe_capture.py captures for real)."""

from __future__ import annotations

import pytest
from _moe_routing_cases import (
    alternating_experts,
    captured_bad_ids,
    captured_plan_none,
    captured_refusals,
    captured_without_host_reads,
    changes_k_after_agreed,
    gathers_per_call,
)


@pytest.mark.parametrize("splits", ["exchanged", "padded"])
def test_one_gather_per_agreed_call(pool2, splits):
    for counts in pool2.run(gathers_per_call, splits):
        # the first call on a new group learns E (the exchange, the texts' two gathers, the exchange again);
        # every later call with the same descriptor is one all-gather
        assert counts[1:] == [1, 1, 1, 1], counts
        assert counts[0] >= 1


def test_expert_counts_that_change_between_layers(pool2):
    assert pool2.run(alternating_experts) == [6, 6]


def test_a_rank_that_changes_its_call_later_raises_everywhere(pool2):
    failures = pool2.run_expect_error(changes_k_after_agreed, 1, exc_type=ValueError,
                                      match=r"rank 1 has site.topk=1 but rank 0 has site.topk=2")
    assert all(f.exc_type.endswith("AgreementError") for f in failures)
    assert pool2.run(alternating_experts) == [6, 6]


@pytest.mark.parametrize("plan", [
    {"strategy": "sequential", "splits": "padded"},
    {"strategy": "token_blocks", "chunks": 2, "splits": "padded"},
    {"strategy": "per_source", "splits": "padded"},
    {"strategy": "expert_groups", "chunks": 2, "splits": "padded"},
    {"strategy": "shared_overlap", "splits": "padded"},
])
def test_capture_branch_reads_nothing_on_the_host(pool2, plan):
    eager_reads = pool2.run(captured_without_host_reads, plan, 11)
    assert all(n > 0 for n in eager_reads)  # the eager call does read (the detector works)


def test_capture_branch_world4(pool4):
    pool4.run(captured_without_host_reads, {"strategy": "token_blocks", "chunks": 2, "splits": "padded"}, 21)


def test_capture_plan_none_runs_the_warmups_padded_choice(pool2):
    assert pool2.run(captured_plan_none, 31) == ["padded", "padded"]


@pytest.mark.parametrize("which, match", [
    ("exchanged", r"splits='exchanged' reads the split sizes on the host, which a CUDA graph cannot"),
    ("no_warmup", r"no eager call with the same shapes, dtype, plan and flags ran on group"),
])
def test_capture_branch_refusals(pool2, which, match):
    pool2.run_expect_error(captured_refusals, which, exc_type=ValueError, match=match)
    assert pool2.run(alternating_experts) == [6, 6]


def test_capture_branch_bad_ids_stop_every_rank(pool2):
    pool2.run_expect_error(captured_bad_ids, 1, exc_type=RuntimeError, match=r"CUDA graph replay\): a rank's topk_ids")
