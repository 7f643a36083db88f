"""Fixtures of the GPU tests: ``pool2``, two NCCL rank processes (one GPU each) per test module."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def pool2():
    from hocket.launch import RankPool

    with RankPool(2, backend="nccl", timeout_s=240, start_method="spawn") as pool:
        yield pool
