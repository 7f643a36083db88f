"""Argument checks shared by spawn and RankPool."""

from __future__ import annotations


def check_world_size(world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size={world_size!r} must be an int (number of rank processes)")
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    return world_size


MAX_SECONDS = 1e8
"""the longest bound accepted (about three years; ``datetime.timedelta`` overflows near 1e14 s)."""


def check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}={value!r} must be a number of seconds")
    if not 0 < value <= MAX_SECONDS:  # also refuses nan and inf
        raise ValueError(f"{name}={value} must be a finite number of seconds > 0 and at most {MAX_SECONDS:g}, "
                         f"e.g. {name}=300")
    return float(value)


def check_threads(threads: object) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads_per_rank={threads!r} must be an int")
    if threads < 1:
        raise ValueError(f"threads_per_rank={threads} must be >= 1")
    return threads
