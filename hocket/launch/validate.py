"""Argument checks shared by spawn and RankPool."""

from __future__ import annotations


def check_world_size(world_size: object) -> int:
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size={world_size!r} must be an int (number of rank processes)")
    if world_size < 1:
        raise ValueError(f"world_size={world_size} must be >= 1")
    return world_size


def check_seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name}={value!r} must be a number of seconds")
    if not value > 0:
        raise ValueError(f"{name}={value} must be > 0 seconds")
    return float(value)


def check_threads(threads: object) -> int:
    if isinstance(threads, bool) or not isinstance(threads, int):
        raise TypeError(f"threads_per_rank={threads!r} must be an int")
    if threads < 1:
        raise ValueError(f"threads_per_rank={threads} must be >= 1")
    return threads
