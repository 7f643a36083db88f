"""``--list-clusters``: the shipped cluster presets, for every subcommand that takes ``--cluster``."""

from __future__ import annotations

import argparse
import sys

CLUSTER_HELP = "cluster preset name or YAML path (`--list-clusters` lists the presets)"


class ListClusters(argparse.Action):
    """Print the preset names, one a line, and exit (like ``--version``: before required arguments are checked)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS, help=None):  # noqa: A002
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None) -> None:
        from hocket.hardware.catalog import list_presets

        sys.stdout.write("\n".join(list_presets()) + "\n")
        parser.exit(0)


def add_cluster_arguments(parser: argparse.ArgumentParser, *, required: bool) -> None:
    """``--cluster`` (preset or YAML path) and ``--list-clusters`` on ``parser``."""
    parser.add_argument("--cluster", required=required, default=None, help=CLUSTER_HELP)
    parser.add_argument("--list-clusters", action=ListClusters, help="print the cluster preset names and exit")
