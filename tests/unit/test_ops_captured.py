"""hocket.ops.CapturedCall's argument checks (CUDA graphs themselves run in tests/gpu)."""

from __future__ import annotations

import pytest
import torch

from hocket.ops import CapturedCall


def test_bad_arguments_name_what_to_fix():
    t = torch.ones(2)
    with pytest.raises(TypeError, match="fn=.*callable"):
        CapturedCall(3, t)
    with pytest.raises(ValueError, match="warmup=0"):
        CapturedCall(lambda x: x, t, warmup=0)
    with pytest.raises(ValueError, match="capture_error_mode='loose'"):
        CapturedCall(lambda x: x, t, capture_error_mode="loose")
    with pytest.raises(ValueError, match="example inputs"):
        CapturedCall(lambda: None)
    with pytest.raises(ValueError, match=r"inputs\[0\] must be a CUDA tensor \(got cpu\)"):
        CapturedCall(lambda x: x, t)
    with pytest.raises(ValueError, match=r"inputs\[0\] must be a CUDA tensor \(got list\)"):
        CapturedCall(lambda x: x, [1])


def test_inputs_must_match_the_captured_ones():
    call = CapturedCall.__new__(CapturedCall)  # no GPU here: check the copy-in rule alone
    call.what, call.inputs = "toy", (torch.zeros(2, 3),)
    call._copy_in((torch.ones(2, 3),))
    assert torch.equal(call.inputs[0], torch.ones(2, 3))
    with pytest.raises(ValueError, match=r"toy takes 1 inputs \(as captured\), got 2"):
        call._copy_in((torch.ones(2, 3), torch.ones(1)))
    with pytest.raises(ValueError, match=r"inputs\[0\] must match the captured one: shape \(2, 3\).*got shape \(3, 2\)"):
        call._copy_in((torch.ones(3, 2),))
    with pytest.raises(ValueError, match=r"dtype torch.float32.*got shape \(2, 3\), dtype torch.float16"):
        call._copy_in((torch.ones(2, 3, dtype=torch.float16),))
