"""Arguments and the run-then-report step shared by the measuring subcommands (bench, demo)."""

from __future__ import annotations

import argparse
import sys


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be >= 1")
    return value


def add_rank_arguments(parser: argparse.ArgumentParser, *, world_flag: str, timeout_s: float) -> None:
    """--world/--world-size, --backend, --threads-per-rank, --timeout-s, --out."""
    parser.add_argument(world_flag, dest="world", type=positive_int, default=None,
                        help="ranks (default: WORLD_SIZE under torchrun, else 2 self-spawned local ranks)")
    parser.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                        help="auto: NCCL when every local rank has a GPU of its own (>= 2), else gloo")
    parser.add_argument("--threads-per-rank", type=positive_int, default=None,
                        help="compute threads per rank (default: cores / ranks)")
    parser.add_argument("--timeout-s", type=float, default=timeout_s,
                        help=f"bound on the whole run and every collective (default {timeout_s:g})")
    parser.add_argument("--out", default=None, help="append results as JSON lines to this file")


def default_world(world: int | None) -> int:
    """``--world`` if given, else torchrun's WORLD_SIZE, else 2."""
    from hocket.launch.torchrun import detect_torchrun

    env = detect_torchrun()
    if env is not None:
        if world is not None and world != env.world_size:
            raise ValueError(f"--world {world} differs from torchrun's WORLD_SIZE={env.world_size}; "
                             "leave the flag out under torchrun")
        return env.world_size
    return 2 if world is None else world


def resolved_backend(args) -> str:
    """The backend the ranks will use ("gloo" or "nccl"), as hocket.launch will choose it."""
    from hocket.launch.backend import choose_backend
    from hocket.launch.torchrun import detect_torchrun

    env = detect_torchrun()
    local = env.local_world_size if env is not None else default_world(args.world)
    return choose_backend(args.backend, local_world_size=local)


def run_settings(args):
    from hocket.bench.session import RunSettings

    return RunSettings(world_size=default_world(args.world), backend=args.backend,
                       threads_per_rank=args.threads_per_rank, timeout_s=args.timeout_s)


def run_and_report(build, args, *, title: str) -> int:
    """Build (spec, settings) with ``build(args)``, run on ranks, print and save; bad input -> exit 2."""
    from hocket.bench.provenance import command_line
    from hocket.bench.report import report
    from hocket.bench.session import run_suite

    try:
        spec = build(args)
        settings = run_settings(args)
    except ValueError as exc:
        print(f"hocket: error: {exc}", file=sys.stderr)
        return 2
    result = run_suite(spec, settings)
    return report(result, title=title, command=command_line(), out=args.out)
