"""hocket.kernels: tile-fused overlap GEMMs in Triton (GPU; Triton's interpreter on CPU).

Importing this package does not import Triton. Plain-Python parts (``schedule``,
``config``, ``workspace``, ``errors``) load eagerly; the Triton launchers load on first
use of one of the names below:

* ``consumer_gemm(a, b, workspace=ConsumerWorkspace(...), out=...)``: GEMM whose tiles wait
  on chunk flags of A (raised by a transfer), tiles in chunk-arrival order;
* ``producer_gemm(a, b, workspace=ProducerWorkspace(...), out=...)``: GEMM whose finished
  row-block groups raise flags, so each group's transfer starts early;
* pieces and edge tiles: ``ramp_row_offsets`` (one row block at the exposed edge, then
  growing) and the workspaces' ``narrow_rows`` (narrow tiles there, ``TileConfig.narrow_n``);
* ``warmup_consumer`` / ``warmup_producer``: compile and load before anything spins;
* ``reset_consumer`` / ``reset_producer``; ``set_flag_on_stream`` / ``wait_flag_on_stream``;
* ``wait_value_on_stream`` / ``stream_wait_available``: a stream held in the GPU's front end
  until a flag rises (``cuStreamWaitValue32``; no SM, no launch; unbounded, so only for
  flags raised by work enqueued before it);
* workspaces' ``dynamic=True``: programs take tiles from a ticket counter (``tickets``);
* workspaces' ``split_rows`` / ``splits``: the edge rows' tiles cut along K into slices on
  different programs (fp32 partials, one ``block_m x block_n`` block per slice, summed by the
  last slice to arrive); measured no faster on an H200, so the offload operators leave it off.
"""

from __future__ import annotations

import importlib

from hocket.kernels.config import TileConfig, candidate_configs, default_config, persistent_programs
from hocket.kernels.errors import FlagTimeoutError, raise_on_timeout, spins_for_timeout
from hocket.kernels.schedule import consumer_schedule, even_row_offsets, producer_schedule, ramp_row_offsets
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace

_LAZY = {
    "consumer_gemm": "hocket.kernels.launch",
    "producer_gemm": "hocket.kernels.launch",
    "warmup_consumer": "hocket.kernels.launch",
    "warmup_producer": "hocket.kernels.launch",
    "reset_consumer": "hocket.kernels.launch",
    "reset_producer": "hocket.kernels.launch",
    "set_flag_on_stream": "hocket.kernels.flags",
    "wait_flag_on_stream": "hocket.kernels.flags",
    "stream_write_available": "hocket.kernels.flags",
    "wait_value_on_stream": "hocket.kernels.stream_wait",
    "stream_wait_available": "hocket.kernels.stream_wait",
}

__all__ = [
    "ConsumerWorkspace", "FlagTimeoutError", "ProducerWorkspace", "TileConfig", "candidate_configs",
    "consumer_schedule", "default_config", "even_row_offsets", "persistent_programs", "producer_schedule",
    "raise_on_timeout", "ramp_row_offsets", "spins_for_timeout", *_LAZY,
]


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hocket.kernels' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
