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
