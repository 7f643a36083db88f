"""Bad MoE inputs raise the same clear error on every rank (no rank waiting), and the group stays usable."""

from __future__ import annotations

import pytest
from _moe_cases import bad_everywhere, bad_on_one_rank, disagree, healthy

BAD = {
    "id_out_of_range": (ValueError, r"topk_ids holds expert id \d+ .*out of range for E=\d+ experts"),
    "id_negative": (ValueError, r"topk_ids holds a negative expert id \(-1"),
    "id_float": (TypeError, r"topk_ids.dtype=torch.float32 is not an integer type"),
    "id_twice": (ValueError, r"topk_ids names the same expert twice for token 0"),
    "k_above_e": (ValueError, r"topk_ids has k=\d+ columns but there are only E=\d+ experts"),
    "odd_gate_up": (ValueError, r"w_gate_up has shape \(2, 8, 15\): its last dim 15 is odd"),
    "weight_dtype": (ValueError, r"w_down.dtype=torch.bfloat16 differs from x.dtype=torch.float32"),
    "weights_shape": (ValueError, r"topk_weights has shape \(4, 3\) but topk_ids has shape \(4, 2\)"),
    "hidden_mismatch": (ValueError, r"hidden sizes disagree: x is \(4, 8\) \(hidden=8\) but w_gate_up"),
    "bad_plan": (ValueError, r"strategy='ring' does not run hocket.ops.moe_experts"),
}


@pytest.mark.parametrize("which", sorted(BAD))
def test_same_bad_input_everywhere(pool2, which):
    exc, match = BAD[which]
    pool2.run_expect_error(bad_everywhere, which, exc_type=exc, match=match)
    assert all(pool2.run(healthy, 1))


@pytest.mark.parametrize("which", ["id_out_of_range", "id_twice", "odd_gate_up", "weight_dtype", "bad_plan"])
def test_bad_input_on_one_rank_raises_everywhere(pool2, which):
    exc, match = BAD[which]
    bad = 1
    failures = pool2.run_expect_error(bad_on_one_rank, which, bad, exc_type=ValueError)
    assert failures[bad].exc_type.endswith(exc.__name__)
    assert failures[0].exc_type.endswith("RankInputError") and "[1]" in failures[0].message
    for failure in failures:
        assert __import__("re").search(match, failure.message), failure.message
    assert all(pool2.run(healthy, 2))


@pytest.mark.parametrize("which, match", [
    ("experts", r"E=5 routed experts do not divide evenly over the 2 ranks"),
    ("topk", r"rank 1 has site.topk=1 but rank 0 has site.topk=2"),
    ("dtype", r"rank 1 has site.dtype='torch.bfloat16' but rank 0 has site.dtype='torch.float32'"),
])
def test_disagreeing_ranks_get_the_same_error(pool2, which, match):
    failures = pool2.run_expect_error(disagree, which, 1, exc_type=ValueError, match=match)
    assert len({f.message for f in failures}) == 1 and all(f.exc_type.endswith("AgreementError") for f in failures)
    assert all(pool2.run(healthy, 3))


def test_data_errors_after_agreed_calls(pool2):
    """A rank whose ids go bad after calls its peers already agreed on still raises everywhere (the MoE
    agreement runs every call)."""
    assert all(pool2.run(healthy, 4))
    pool2.run_expect_error(bad_on_one_rank, "id_negative", 0, exc_type=ValueError, match="negative expert id")
    assert all(pool2.run(healthy, 4))
