"""What the 2-GPU NCCL test modules share: the module-level skip and each run's random seed."""

from __future__ import annotations

import os

import pytest
import torch

SEED = int.from_bytes(os.urandom(4), "little")
"""one seed per test run (printed by the failing checks), shared by the 2-GPU modules"""


def require_two_gpus() -> None:
    """Skip the calling test module without two CUDA GPUs, or under the Triton interpreter."""
    if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
        pytest.skip("needs >= 2 CUDA GPUs", allow_module_level=True)
    if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
        pytest.skip("TRITON_INTERPRET is set: run GPU tests in their own process", allow_module_level=True)
