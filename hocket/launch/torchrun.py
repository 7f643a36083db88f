"""Detect a rank environment set up by ``torchrun`` (or any launcher using its variables)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from hocket.env import process_environment

_REQUIRED = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
_MARKERS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "TORCHELASTIC_RUN_ID")


@dataclass(frozen=True, kw_only=True)
class TorchrunEnv:
    """The rendezvous variables of one rank started by torchrun."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    master_addr: str
    master_port: int


def _int_var(environ: Mapping[str, str], name: str, default: int | None = None) -> int:
    raw = environ.get(name)
    if raw is None or raw.strip() == "":
        if default is None:
            raise ValueError(f"environment variable {name} is not set")
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(
            f"environment variable {name}={raw!r} is not an integer; torchrun sets it to one"
        ) from None


def detect_torchrun(environ: Mapping[str, str] | None = None) -> TorchrunEnv | None:
    """Return the torchrun rank environment, or None when this process was not started by one.

    A partial environment (say ``RANK`` without ``MASTER_PORT``) raises ``ValueError``
    naming what is missing, rather than silently running as a single process.
    """
    env = process_environment() if environ is None else environ
    if not any(env.get(name) for name in _MARKERS):
        return None
    missing = [name for name in _REQUIRED if not env.get(name)]
    if missing:
        raise ValueError(
            f"incomplete torchrun environment: {', '.join(missing)} not set "
            f"(found {', '.join(n for n in _MARKERS if env.get(n))}); launch with "
            "`torchrun --nproc-per-node N ...` or unset RANK/WORLD_SIZE/LOCAL_RANK to self-spawn"
        )
    rank = _int_var(env, "RANK")
    world_size = _int_var(env, "WORLD_SIZE")
    local_rank = _int_var(env, "LOCAL_RANK", default=rank)
    local_world_size = _int_var(env, "LOCAL_WORLD_SIZE", default=world_size)
    master_port = _int_var(env, "MASTER_PORT")
    if world_size < 1:
        raise ValueError(f"WORLD_SIZE={world_size} must be >= 1")
    if not 0 <= rank < world_size:
        raise ValueError(f"RANK={rank} must be in [0, WORLD_SIZE={world_size})")
    if not 1 <= local_world_size <= world_size:
        raise ValueError(f"LOCAL_WORLD_SIZE={local_world_size} must be in [1, WORLD_SIZE={world_size}]")
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"LOCAL_RANK={local_rank} must be in [0, LOCAL_WORLD_SIZE={local_world_size})")
    if not 0 < master_port < 65536:
        raise ValueError(f"MASTER_PORT={master_port} is not a TCP port (1..65535)")
    return TorchrunEnv(
        rank=rank,
        world_size=world_size,
        local_rank=local_rank,
        local_world_size=local_world_size,
        master_addr=env["MASTER_ADDR"],
        master_port=master_port,
    )
