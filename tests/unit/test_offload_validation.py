"""Offload operators name bad inputs clearly, and say that a CUDA device is needed (CPU here)."""

from dataclasses import replace

import pytest
import torch

from hocket.core.plan import Plan
from hocket.ops.offload import matmul_from_host, matmul_to_host
from hocket.ops.offload_plans import _resolve_plan


def _rand(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


def test_inner_dim_mismatch_named():
    with pytest.raises(ValueError, match=r"A_host.shape=\(64, 32\).*B.shape=\(16, 8\).*k=32 vs 16"):
        matmul_from_host(_rand(64, 32), _rand(16, 8))
    with pytest.raises(ValueError, match=r"inner dims differ"):
        matmul_to_host(_rand(64, 32), _rand(31, 8))


def test_dtype_mismatch_named():
    with pytest.raises(ValueError, match="A_host.dtype=torch.bfloat16 but B.dtype=torch.float32"):
        matmul_from_host(_rand(8, 4, dtype=torch.bfloat16), _rand(4, 8))


def test_non_tensor_and_wrong_rank():
    with pytest.raises(TypeError, match="B must be a torch.Tensor"):
        matmul_from_host(_rand(8, 4), [[1.0]])
    with pytest.raises(ValueError, match=r"A must be 2-D.*\(2, 8, 4\)"):
        matmul_to_host(_rand(2, 8, 4), _rand(4, 8))


def test_out_shape_checked_before_device():
    with pytest.raises(ValueError, match=r"out is \(8, 9\).*\[8, 8\]"):
        matmul_to_host(_rand(8, 4), _rand(4, 8), out=_rand(8, 9))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only message")
def test_cpu_only_machine_says_cuda_is_needed():
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        matmul_from_host(_rand(64, 32), _rand(32, 16))
    with pytest.raises(RuntimeError, match="needs a CUDA device"):
        matmul_to_host(_rand(64, 32), _rand(32, 16))


def test_plan_resolution():
    assert _resolve_plan(None, 1000).strategy == "chunked"
    assert _resolve_plan(None, 1000).chunks == 8
    assert _resolve_plan(None, 100).chunks == 1
    assert _resolve_plan("tile_fused", 1000).strategy == "tile_fused"
    with pytest.raises(ValueError, match="plan.strategy='ring' is not an offload strategy"):
        _resolve_plan(Plan(strategy="ring"), 1000)
    with pytest.raises(ValueError, match="plan.transport='p2p'"):
        _resolve_plan(Plan(strategy="chunked", transport="p2p"), 1000)


def test_offload_tile_config_rule():
    from hocket.kernels.config import NARROW_BF16, WIDE_BF16, config_for
    from hocket.ops.offload import offload_tile_config

    for dtype in (torch.bfloat16, torch.float16):
        for n in (7168, 1280, 256):
            cfg = offload_tile_config(8192, n, 8192, dtype)
            assert cfg == replace(WIDE_BF16, tma=True), n
            assert (cfg.block_m, cfg.block_n, cfg.narrow_n, cfg.num_stages, cfg.tma) == (128, 256, 128, 4, True)
        assert offload_tile_config(8192, 200, 8192, dtype) == replace(NARROW_BF16, tma=True)
    assert offload_tile_config(777, 4096, 300, torch.float32) == config_for(777, 4096, 300, torch.float32)
    assert not offload_tile_config(777, 4096, 300, torch.float32).tma, "fp32 descriptor loads were never measured"
