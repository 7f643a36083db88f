"""Starting rank processes: torchrun detection, self-spawned ranks, a persistent rank pool."""

from hocket.launch.backend import choose_backend, device_for_rank
from hocket.launch.entry import run_everywhere
from hocket.launch.errors import RankError, RankExpectationError, RankFailure, RankTimeout
from hocket.launch.pool import RankPool
from hocket.launch.process_group import RankContext, init_from_store, init_torchrun
from hocket.launch.spawn import spawn
from hocket.launch.threads import default_threads_per_rank, set_rank_threads
from hocket.launch.torchrun import TorchrunEnv, detect_torchrun

__all__ = ["run_everywhere",
    "RankContext",
    "RankError",
    "RankExpectationError",
    "RankFailure",
    "RankPool",
    "RankTimeout",
    "TorchrunEnv",
    "choose_backend",
    "default_threads_per_rank",
    "detect_torchrun",
    "device_for_rank",
    "init_from_store",
    "init_torchrun",
    "set_rank_threads",
    "spawn",
]
