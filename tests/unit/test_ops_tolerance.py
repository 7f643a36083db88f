"""Tolerances per dtype: bf16 grows with world size; errors are relative to the reference scale."""

from __future__ import annotations

import pytest
import torch

from hocket.ops.tolerance import assert_close, max_error, tolerance, within_tolerance


def test_bf16_tolerance_grows_with_world_and_is_looser_than_fp32():
    assert tolerance(torch.bfloat16, world=8).atol > tolerance("bf16", world=2).atol
    assert tolerance(torch.float32).atol < tolerance(torch.bfloat16).atol
    with pytest.raises(ValueError, match="dtype"):
        tolerance("int8")


def test_error_relative_to_reference_scale():
    expected = torch.randn(64, 64) * 100
    noisy = expected + 1e-3
    assert max_error(noisy, expected) == pytest.approx(1e-3 / expected.abs().max().item(), rel=1e-2)
    assert within_tolerance(noisy, expected)
    bad = expected.clone()
    bad[3, 4] += expected.abs().max() * 0.1
    assert not within_tolerance(bad, expected)
    with pytest.raises(AssertionError, match="max error"):
        assert_close(bad, expected, what="out")
    with pytest.raises(AssertionError, match="shape"):
        assert_close(expected[:3], expected)


def test_bf16_rounding_of_a_sum_passes_at_its_world_size():
    parts = [torch.randn(128, 128) for _ in range(4)]
    exact = sum(parts)
    low = parts[0].bfloat16()
    for p in parts[1:]:
        low = low + p.bfloat16()
    assert_close(low, exact.bfloat16(), world=4)
