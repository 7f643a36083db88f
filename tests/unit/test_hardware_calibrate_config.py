"""Calibration settings, points and transfers without ranks; CLI bad input."""

from __future__ import annotations

import random

import pytest
import torch

from hocket.calibrate import CalibrateConfig, default_config
from hocket.calibrate.gemm import gemm_call, gemm_point, row_chunked_mm
from hocket.calibrate.transfers import make_transfer
from hocket.cli.main import main


@pytest.mark.parametrize("device_type", ["cpu", "cuda"])
def test_default_grids_include_row_chunks(device_type):
    for quick in (True, False):
        config = default_config(quick=quick, device_type=device_type)
        assert config.quick is quick and max(config.gemm_chunks) > 1
        assert list(config.sizes_bytes) == sorted(config.sizes_bytes)
    assert default_config(quick=True, device_type="cuda").dtype == "bfloat16"
    assert default_config(quick=True, device_type="cpu", dtype="bf16").dtype == "bfloat16"


def test_config_rejects_bad_values():
    good = dict(quick=True, dtype="float32", gemm_shapes=((8, 8, 8),), sizes_bytes=(1024,),
                contention_shape=(8, 8, 8), contention_bytes=1024)
    CalibrateConfig(**good)
    with pytest.raises(ValueError, match="three positive ints"):
        CalibrateConfig(**{**good, "gemm_shapes": ((8, 0, 8),)})
    with pytest.raises(ValueError, match="unknown"):
        CalibrateConfig(**{**good, "collectives": ("broadcast",)})
    with pytest.raises(ValueError, match="dtype"):
        CalibrateConfig(**{**good, "dtype": "int7"})
    with pytest.raises(ValueError, match="device_type"):
        default_config(quick=True, device_type="tpu")


def test_row_chunked_gemm_computes_the_whole_product():
    rng = random.Random()
    m, k, n, chunks = rng.randint(8, 64), rng.randint(1, 32), rng.randint(1, 32), rng.randint(2, 8)
    a, b = torch.randn(m, k), torch.randn(k, n)
    out = torch.full((m, n), float("nan"))
    row_chunked_mm(a, b, out, chunks=chunks)()
    torch.testing.assert_close(out, a @ b)
    point = gemm_point(m, k, n, dtype="float32", chunks=chunks, total_ms=2.0)
    assert point.m == m // chunks and point.ms == pytest.approx(2.0 / chunks)
    assert point.tflops == pytest.approx(2 * (m // chunks) * k * n / (point.ms * 1e9))
    with pytest.raises(ValueError, match="chunks"):
        gemm_call(4, 4, 4, dtype="float32", device=torch.device("cpu"), chunks=5)


def test_transfers_that_do_not_exist_here_are_none():
    cpu = torch.device("cpu")
    for name in ("all_gather", "p2p", "copy_engine", "host_link"):
        assert make_transfer(name, 4096, dtype="float32", group=None, device=cpu) is None
    with pytest.raises(ValueError, match="unknown"):
        make_transfer("smoke_signal", 4096, dtype="float32", group=None, device=cpu)


def test_cli_bad_dtype_is_a_clear_error(capsys):
    assert main(["calibrate", "--quick", "--dtype", "int7", "--world", "2", "--backend", "gloo"]) == 2
    assert "dtype='int7'" in capsys.readouterr().err
