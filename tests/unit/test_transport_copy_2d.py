"""hocket.transport.copy_2d: the region arithmetic and the argument checks (no GPU needed)."""

from __future__ import annotations

import pytest
import torch

from hocket.transport.copy_2d import check_pair, region


def test_a_column_block_of_a_row_major_matrix_is_rows_of_its_width_one_matrix_row_apart():
    m = torch.zeros(6, 10, dtype=torch.bfloat16)
    assert region(m[1:4, 2:7], "dst") == (20, 10, 3)  # pitch 10 x 2 bytes, width 5 x 2 bytes, 3 rows
    assert region(m, "dst") == (20, 20, 6)
    assert region(m[2:3, :4], "dst") == (8, 8, 1)  # one row: its pitch is its width


def test_a_transposed_view_is_refused_with_its_strides_named():
    with pytest.raises(ValueError, match=r"src has strides \(1, 4\).*contiguous"):
        region(torch.zeros(6, 4).t(), "src")


def test_a_vector_is_refused_with_its_shape_named():
    with pytest.raises(ValueError, match=r"dst has shape \(8,\)"):
        region(torch.zeros(8), "dst")


def test_shape_and_dtype_must_match():
    with pytest.raises(ValueError, match=r"dst is \(2, 3\).*src is \(3, 2\)"):
        check_pair(torch.zeros(2, 3), torch.zeros(3, 2))
    with pytest.raises(ValueError, match="float32.*bfloat16"):
        check_pair(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bfloat16))


def test_pageable_host_memory_is_refused_with_the_fix():
    with pytest.raises(ValueError, match="dst is in pageable host memory.*pin_memory=True"):
        check_pair(torch.zeros(2, 3), torch.zeros(2, 3))
