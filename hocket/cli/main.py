"""`hocket` console script: one module per subcommand under hocket/cli/.

Each subcommand module defines ``register(subparsers) -> None``, which adds its parser
and sets ``func`` (a callable taking the parsed args and returning an exit code).
:data:`SUBCOMMANDS` lists the modules, so adding a subcommand means adding one file and
appending it there. Keep heavy imports (torch, matplotlib) inside ``func``: ``hocket --help``
stays fast.
"""

from __future__ import annotations

import argparse
import sys

from hocket.cli import bench, calibrate, demo, plan, predict, regret, simulate, validate

SUBCOMMANDS = (bench, calibrate, demo, plan, predict, simulate, validate, regret)
"""the subcommand modules, in the order ``hocket --help`` lists them"""


def build_parser() -> argparse.ArgumentParser:
    from hocket.core.version import __version__

    parser = argparse.ArgumentParser(
        prog="hocket",
        description="Generate, plan and measure compute-communication overlap operators.",
    )
    parser.add_argument("--version", action="version", version=f"hocket {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in SUBCOMMANDS:
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
