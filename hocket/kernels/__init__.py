"""hocket.kernels: tile-fused overlap GEMMs in Triton (GPU; Triton's interpreter on CPU).

Importing this package does not import Triton, and neither does any module of it outside
:data:`TRITON_MODULES` (the ``@triton.jit`` kernels and their launchers): plain-Python parts
(``schedule``, ``config``, ``workspace``, ``errors``, ``peer_schedule``, ``stream_memops``) load
without it, so the operators, planner and simulator run on a machine without Triton. The
launchers load on first use of one of the names below:

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
* the peer-read GEMM's ``dynamic=True``: programs take tiles from a ticket counter (``tickets``);
* workspaces' ``split_rows`` / ``splits``: the edge rows' tiles cut along K into slices on
  different programs (fp32 partials, one ``block_m x block_n`` block per slice, summed by the
  last slice to arrive); measured no faster on an H200, so the offload operators leave it off.
"""

from __future__ import annotations

from hocket.kernels.config import TileConfig, candidate_configs, default_config, persistent_programs
from hocket.kernels.errors import FlagTimeoutError, raise_on_timeout, spins_for_timeout
from hocket.kernels.schedule import consumer_schedule, even_row_offsets, producer_schedule, ramp_row_offsets
from hocket.kernels.workspace import ConsumerWorkspace, ProducerWorkspace

TRITON_MODULES = ("consumer", "flags", "gemm_tile", "launch", "peer_flags", "peer_read_gemm", "producer", "tickets")
"""the modules of this package that import Triton at load (kernels and launchers); import one
only where a kernel is built or launched"""

_LAUNCH = ("consumer_gemm", "producer_gemm", "warmup_consumer", "warmup_producer", "reset_consumer", "reset_producer")
_FLAGS = ("set_flag_on_stream", "wait_flag_on_stream", "stream_write_available")
_STREAM_WAIT = ("wait_value_on_stream", "stream_wait_available")

__all__ = [
    "ConsumerWorkspace", "FlagTimeoutError", "ProducerWorkspace", "TileConfig", "candidate_configs",
    "consumer_schedule", "default_config", "even_row_offsets", "persistent_programs", "producer_schedule",
    "raise_on_timeout", "ramp_row_offsets", "spins_for_timeout", *_LAUNCH, *_FLAGS, *_STREAM_WAIT,
]


def __getattr__(name: str) -> object:
    # PEP 562: the launchers import Triton, so they load on first use only
    if name in _LAUNCH:
        from hocket.kernels import launch as home
    elif name in _FLAGS:
        from hocket.kernels import flags as home
    elif name in _STREAM_WAIT:
        from hocket.kernels import stream_wait as home
    else:
        raise AttributeError(f"module 'hocket.kernels' has no attribute {name!r}")
    value = getattr(home, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
