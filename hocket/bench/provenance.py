"""Where a measurement came from: versions, git hash, environment, hardware, command."""

from __future__ import annotations

import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

import hocket.core
from hocket.core.version import __version__
from hocket.env import git_hash_env, transport_environment


@dataclass(frozen=True, kw_only=True)
class Provenance:
    """Everything a results line records besides the site, plan and times."""

    hardware: dict
    environment: dict[str, str]
    versions: dict[str, str | None]
    git_hash: str | None
    command: str
    extra: dict = field(default_factory=dict)
    """run settings that shape the numbers (backend, threads per rank, ...)."""


def package_version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def versions() -> dict[str, str | None]:
    """torch, triton, NCCL, driver and hocket versions (None where absent)."""
    from hocket.hardware.fingerprint import runtime_versions

    runtime = runtime_versions()
    return {
        "torch": runtime["torch"],
        "triton": package_version("triton"),
        "nccl": runtime["nccl"],
        "driver": runtime["driver"],
        "hocket": __version__,
    }


def git_hash(path: Path | None = None) -> str | None:
    """The commit of the checkout holding hocket (``+dirty`` when it has local changes), or None.
    ``HOCKET_GIT_HASH`` (:func:`hocket.env.git_hash_env`), when set, is returned as it is instead:
    git is not asked (a device machine's copy of the tree carries a stale ``.git``)."""
    given = git_hash_env()
    if given is not None:
        return given
    where = Path(path) if path is not None else Path(hocket.core.__file__).resolve().parent.parent
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True,
                              timeout=10, check=False)
        if head.returncode != 0:
            return None
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=where,
                               capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    suffix = "+dirty" if dirty.returncode == 0 and dirty.stdout.strip() else ""
    return head.stdout.strip() + suffix


def command_line(argv: list[str] | None = None) -> str:
    """The exact command, shell-quoted, as the user typed it (``hocket ...`` for the console script)."""
    args = list(sys.argv if argv is None else argv)
    if args and Path(args[0]).name in ("hocket", "__main__.py", "main.py"):
        args[0] = "hocket"
    return " ".join(shlex.quote(a) for a in args)


def collect(*, command: str, hardware: dict, extra: dict | None = None) -> Provenance:
    """Gather provenance once (on rank 0) for a set of results lines."""
    return Provenance(hardware=dict(hardware), environment=transport_environment(), versions=versions(),
                      git_hash=git_hash(), command=command, extra=dict(extra or {}))
