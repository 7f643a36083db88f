"""TileConfig: narrow edge-tile width (default and validation)."""

import pytest
import torch

from hocket.kernels.config import BF16_CONFIGS, TileConfig
from hocket.kernels.workspace import ProducerWorkspace


@pytest.mark.parametrize("block_n,expected", [(256, 64), (128, 64), (64, 32), (32, 16), (16, 16)])
def test_default_narrow_width(block_n, expected):
    cfg = TileConfig(block_m=64, block_n=block_n, block_k=32)
    assert cfg.narrow_n == expected
    ws = ProducerWorkspace(m=256, n=300, k=32, dtype=torch.float32, device="cpu", config=cfg, groups=2,
                           narrow_rows=64)
    narrow_tiles = sum(tile[2] for tile in ws.schedule.tiles)
    if expected < block_n:
        assert ws.schedule.narrow_block_n == expected and narrow_tiles == -(-300 // expected)
    else:  # as wide as a full tile: no narrow tiles
        assert ws.schedule.narrow_block_n is None and narrow_tiles == 0


def test_explicit_narrow_width_checked():
    assert TileConfig(block_n=256, narrow_block_n=128).narrow_n == 128
    with pytest.raises(ValueError, match="narrow_block_n=512 must be <= block_n=256"):
        TileConfig(block_n=256, narrow_block_n=512)
    with pytest.raises(ValueError, match="narrow_block_n=48 must be a power of two"):
        TileConfig(block_n=256, narrow_block_n=48)
    assert all(cfg.narrow_n < cfg.block_n for cfg in BF16_CONFIGS)


def test_config_for_rule():
    import random

    from hocket.kernels.config import (
        FP32_CONFIGS,
        NARROW_BF16,
        SHARED_MEMORY_BYTES,
        WIDE_BF16,
        config_for,
        shared_memory_bytes,
    )

    rng = random.Random()
    for _ in range(50):
        m, k = rng.randint(1, 1 << 16), rng.randint(1, 1 << 16)
        n = rng.randint(1, 1 << 15)
        for dtype in (torch.bfloat16, torch.float16, "bfloat16"):
            cfg = config_for(m, n, k, dtype)
            assert cfg == (WIDE_BF16 if n >= 256 else NARROW_BF16), (m, n, k)
            assert cfg.block_m == 128 and shared_memory_bytes(cfg, 2) <= SHARED_MEMORY_BYTES
        assert config_for(m, n, k, torch.float32) == FP32_CONFIGS[0]
    assert (WIDE_BF16.block_n, WIDE_BF16.num_stages, WIDE_BF16.narrow_n) == (256, 4, 128)
    assert WIDE_BF16 in BF16_CONFIGS, "benchmarks choosing among candidate_configs see the operators' config"


def test_config_for_checks_arguments():
    from hocket.kernels.config import config_for

    with pytest.raises(ValueError, match="n=0 must be a positive int"):
        config_for(128, 0, 64, torch.bfloat16)
    with pytest.raises(ValueError, match="k=2.5 must be a positive int"):
        config_for(128, 64, 2.5, torch.bfloat16)
    with pytest.raises(ValueError, match="dtype=torch.int8 has no tile config"):
        config_for(128, 64, 64, torch.int8)


def test_shared_memory_and_label():
    from hocket.kernels.config import shared_memory_bytes

    cfg = TileConfig(block_m=128, block_n=256, block_k=64, num_stages=4)
    assert shared_memory_bytes(cfg, 2) == 4 * (128 * 64 + 64 * 256) * 2
    assert shared_memory_bytes(cfg, 4) == 2 * shared_memory_bytes(cfg, 2)
    with pytest.raises(ValueError, match="itemsize=0"):
        shared_memory_bytes(cfg, 0)
    assert cfg.label() == "128x256x64/g8/w8/s4"
    assert TileConfig(block_n=256, narrow_block_n=128).label().endswith("/n128")


def test_tma_flag_is_a_bool_and_shows_in_the_label():
    with pytest.raises(ValueError, match=r"TileConfig\.tma='yes' must be a bool"):
        TileConfig(tma="yes")
    assert TileConfig(tma=True).label().endswith("/tma")
    assert "/tma" not in TileConfig().label()


def test_descriptor_ready_needs_unit_columns_and_16_byte_rows():
    from hocket.kernels.descriptors import descriptor_ready

    assert descriptor_ready(torch.zeros(4, 8, dtype=torch.bfloat16))  # 16-byte rows
    assert not descriptor_ready(torch.zeros(4, 7, dtype=torch.bfloat16)), "14-byte rows"
    assert not descriptor_ready(torch.zeros(8, 8, dtype=torch.bfloat16).t()), "column-major"
    assert not descriptor_ready(torch.zeros(4, 16, dtype=torch.bfloat16)[:, 1:9]), "base 2 bytes off"
    assert descriptor_ready(torch.zeros(4, 16, dtype=torch.bfloat16)[:, 8:16]), "base 16 bytes on"
    assert not descriptor_ready(torch.zeros(8, dtype=torch.bfloat16)), "1-D"


def test_operand_descriptors_only_for_tma_configs_on_aligned_operands():
    pytest.importorskip("triton")
    from hocket.kernels.descriptors import operand_descriptors

    cfg = TileConfig(block_m=32, block_n=64, block_k=16, tma=True)
    a, b = torch.zeros(100, 56, dtype=torch.bfloat16), torch.zeros(56, 72, dtype=torch.bfloat16)
    a_desc, b_desc, narrow = operand_descriptors(cfg, a, b, 16)
    assert list(a_desc.block_shape) == [32, 16] and list(b_desc.block_shape) == [16, 64]
    assert list(narrow.block_shape) == [16, 16]
    assert operand_descriptors(cfg, a, b, 0)[2] is None, "no narrow tiles: no narrow descriptor"
    assert operand_descriptors(TileConfig(block_m=32, block_n=64, block_k=16), a, b, 16) == (None, None, None)
    odd = torch.zeros(56, 71, dtype=torch.bfloat16)
    assert operand_descriptors(cfg, a, odd, 16) == (None, None, None), "unaligned B rows: pointer loads"


def test_fused_config_loads_16_bit_operands_through_descriptors():
    from dataclasses import replace

    from hocket.kernels.config import config_for, fused_config

    for dtype in (torch.bfloat16, torch.float16, "bfloat16"):
        for n in (64, 1280, 7168):
            assert fused_config(4096, n, 1024, dtype) == replace(config_for(4096, n, 1024, dtype), tma=True)
    assert fused_config(4096, 7168, 1024, torch.float32) == config_for(4096, 7168, 1024, torch.float32)
    assert not fused_config(4096, 7168, 1024, torch.float32).tma
    with pytest.raises(ValueError, match="has no tile config"):
        fused_config(128, 64, 64, torch.int8)


@pytest.mark.parametrize("interpreted", [True, False])
def test_launches_ask_for_fp_fusion_whatever_tritons_default(interpreted):
    """Triton 3.10 turns FMA fusion off by default; the kernels keep the fusion they were tuned with."""
    cfg = TileConfig(block_m=64, block_n=64, block_k=32)
    ws = ProducerWorkspace(m=128, n=96, k=64, dtype=torch.bfloat16, device="cpu", config=cfg, groups=2,
                           narrow_rows=64)
    flags = ws.launch_flags(interpreted=interpreted)
    assert flags["enable_fp_fusion"] is True and flags["num_warps"] == cfg.num_warps
