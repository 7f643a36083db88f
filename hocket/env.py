"""Every environment variable hocket reads is read here, and nowhere else (docs/configuration.md).

:data:`SETTINGS` lists the user settings (name, default, unit, what it changes); each has one function
below that reads and checks it at call time. Settings that change what a rank executes are part of the
operators' agreement descriptor (:mod:`hocket.ops.agreement`), so ranks started with different values
raise the same :class:`~hocket.ops.agreement.AgreementError` at their first call instead of waiting.
Sizes that used to be variables (relay slots and message size, the copy-engine mailbox, how many CUDA
graphs a process keeps) are arguments now: :class:`hocket.core.sizes.TransportSizes` and
:func:`hocket.ops.eager_graph.set_max_graphs`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Setting:
    """One ``HOCKET_*`` user setting: its variable, its default, its unit, and what it changes."""

    name: str
    default: str
    unit: str
    changes: str
    agreed: bool
    """whether it changes what a rank executes, and so is in the agreement descriptor"""


SETTINGS = (
    Setting("HOCKET_DISABLE", "0", "flag (1/true/yes/on)", "every operator and graph pass runs the sequential "
            "plan", agreed=True),
    Setting("HOCKET_AUTOTUNE", "unset (the API argument decides; off)", "flag (1 on, 0 off)", "plan=None times "
            "candidates on the live group instead of predicting", agreed=True),
    Setting("HOCKET_CACHE_DIR", "$XDG_CACHE_HOME/hocket or ~/.cache/hocket", "directory", "where calibration "
            "profiles and the plan cache live", agreed=False),
    Setting("HOCKET_PROFILE", "unset (the profile of this machine's fingerprint)", "JSON file", "the calibration "
            "profile the planner prices with", agreed=False),
    Setting("HOCKET_CLUSTER", "unset (hocket.hardware.probe() of this machine)", "preset name or YAML file",
            "the cluster the live planner plans for", agreed=False),
    Setting("HOCKET_AGREEMENT", "1", "1, 0 or always", "when ranks exchange their call descriptors: each new "
            "signature (1), every call (always), or only the first call on a group (0)", agreed=True),
    Setting("HOCKET_TIMEOUT_S", "300", "seconds", "the bound on every wait hocket performs itself", agreed=False),
    Setting("HOCKET_EAGER_GRAPHS", "off", "off/0, auto or on/1", "eager GPU calls replayed from CUDA graphs "
            "hocket captures itself", agreed=True),
    Setting("HOCKET_HOST_STAGE_DIR", "/dev/shm", "directory", "where the host-staged relay puts its shared, "
            "pinned host buffers", agreed=True),
    Setting("HOCKET_GIT_HASH", "unset (ask git)", "commit id", "the commit results lines record", agreed=False),
)
"""The user settings, for docs and tests; no other ``HOCKET_*`` variable is read."""

TRANSPORT_ENV_VARS = (
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO",
    "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_SOCKET_IFNAME",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP", "NVSHMEM_DISABLE_NVLS",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME",
)
"""The transport-affecting environment a fingerprint and a results line record."""


def raw(names: tuple[str, ...]) -> tuple[str | None, ...]:
    """The raw values of the variables ``names`` now (None where unset), unparsed: a cheap memo key for a
    caller that re-reads settings on every call (``hocket.ops.dispatch``)."""
    environ = os.environ
    return tuple(environ.get(name) for name in names)


def process_environment() -> Mapping[str, str]:
    """The process environment itself, for readers of variables hocket does not own (torchrun's ``RANK``,
    ``WORLD_SIZE``, ...; :mod:`hocket.launch.torchrun`). ``HOCKET_*`` settings are read by their functions
    here only."""
    return os.environ


def raw_values(names: tuple[str, ...]) -> dict[str, str]:
    """``{name: raw value}`` of those of ``names`` that are set."""
    environ = os.environ
    return {name: environ[name] for name in names if name in environ}


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def disabled() -> bool:
    """``HOCKET_DISABLE`` (default 0; 1, true, yes or on sets it): every operator and graph pass runs the
    sequential plan. Agreed across ranks."""
    return _flag("HOCKET_DISABLE")


def autotune_env() -> bool | None:
    """``HOCKET_AUTOTUNE`` (default unset): 1 (true, yes, on) times a ``plan=None`` call's candidates on the
    live group, 0 predicts; unset returns None and the API argument decides (default off). Agreed across
    ranks for ``plan=None`` calls (an autotuning rank runs timing collectives the others would not)."""
    raw_value = os.environ.get("HOCKET_AUTOTUNE")
    if raw_value is None or raw_value.strip() == "":
        return None
    return raw_value.strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """``HOCKET_CACHE_DIR`` (default ``$XDG_CACHE_HOME/hocket``, else ``~/.cache/hocket``): the directory of
    calibration profiles and the plan cache."""
    raw_value = os.environ.get("HOCKET_CACHE_DIR")
    if raw_value:
        return Path(raw_value).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hocket"


def profile_path() -> Path | None:
    """``HOCKET_PROFILE`` (default unset: the profile of this machine's fingerprint under
    :func:`cache_dir`): an explicit calibration profile JSON file to price with."""
    raw_value = os.environ.get("HOCKET_PROFILE")
    return Path(raw_value).expanduser() if raw_value else None


AGREEMENT_MODES = ("1", "0", "always")


def agreement_mode() -> str:
    """``HOCKET_AGREEMENT`` (default ``1``): when the ranks of a group exchange their call descriptors.
    ``1``: at each new call signature. ``always``: at every call (a rank that diverges after the first call
    raises a clear error instead of timing out in a data collective; one small collective per call).
    ``0`` (not advised): only at the first call on each group, so that ranks whose modes differ still meet
    in one exchange and raise; later divergence then shows as a ``TransportError`` after
    ``HOCKET_TIMEOUT_S``, and ``plan=None`` is chosen by each rank alone. The mode is in the descriptor."""
    raw_value = os.environ.get("HOCKET_AGREEMENT", "").strip().lower() or "1"
    if raw_value not in AGREEMENT_MODES:
        raise ValueError(f"HOCKET_AGREEMENT={raw_value!r} must be one of {AGREEMENT_MODES} (default 1: check each "
                         f"new call signature)")
    return raw_value


def agreement_check() -> bool:
    """Whether ``HOCKET_AGREEMENT`` exchanges descriptors beyond the first call on a group (not ``0``)."""
    return agreement_mode() != "0"


def agreement_every_call() -> bool:
    """Whether ``HOCKET_AGREEMENT=always``: the descriptor exchange runs on every call."""
    return agreement_mode() == "always"


MAX_TIMEOUT_S = 1e8
"""the largest ``HOCKET_TIMEOUT_S`` (about three years): waits take a ``datetime.timedelta``, which overflows
near 1e14 s, and an infinite wait is what the setting exists to prevent."""


def wait_timeout_s() -> float:
    """``HOCKET_TIMEOUT_S`` (default 300, seconds > 0 and at most :data:`MAX_TIMEOUT_S`): the bound on every
    wait hocket performs itself (host waits, device-side barriers, the relay watchdog)."""
    raw_value = os.environ.get("HOCKET_TIMEOUT_S", "").strip()
    if not raw_value:
        return 300.0
    try:
        seconds = float(raw_value)
    except ValueError:
        raise ValueError(f"HOCKET_TIMEOUT_S={raw_value!r} is not a number; set it to a number of seconds > 0, "
                         f"e.g. HOCKET_TIMEOUT_S=300 (or unset it for the default 300)") from None
    if not 0 < seconds <= MAX_TIMEOUT_S:  # also refuses nan
        raise ValueError(f"HOCKET_TIMEOUT_S={raw_value!r} must be a finite number of seconds > 0 and at most "
                         f"{MAX_TIMEOUT_S:g}, e.g. HOCKET_TIMEOUT_S=300 (or unset it for the default 300); every "
                         f"wait hocket performs is bounded by it")
    return seconds


def git_hash_env() -> str | None:
    """``HOCKET_GIT_HASH`` (default unset: ask git): the commit results lines record. For machines that run
    a copy of the tree whose ``.git`` is stale (device machines): set it to the commit the copy was made
    from, e.g. ``HOCKET_GIT_HASH=$(git rev-parse HEAD)`` where it was made."""
    raw_value = os.environ.get("HOCKET_GIT_HASH", "").strip()
    if any(c.isspace() for c in raw_value):
        raise ValueError(f"HOCKET_GIT_HASH={raw_value!r} must be one commit id without spaces, e.g. "
                         f"$(git rev-parse HEAD)")
    return raw_value or None


def transport_environment() -> dict[str, str]:
    """The transport-affecting environment (:data:`TRANSPORT_ENV_VARS`), recorded in fingerprints and results."""
    return raw_values(TRANSPORT_ENV_VARS)


def cluster_env() -> str | None:
    """``HOCKET_CLUSTER`` (default unset: ``hocket.hardware.probe()`` of this machine): a cluster preset name
    or YAML path describing where this job runs, for the live planner."""
    raw_value = os.environ.get("HOCKET_CLUSTER", "").strip()
    return raw_value or None


def host_stage_dir() -> Path:
    """``HOCKET_HOST_STAGE_DIR`` (default ``/dev/shm``, a directory every process of the node can map and
    register): where the multi-process ``host_staged`` relay puts its shared, pinned host buffers. Agreed
    across ranks where the relay may run."""
    raw_value = os.environ.get("HOCKET_HOST_STAGE_DIR", "").strip()
    return Path(raw_value).expanduser() if raw_value else Path("/dev/shm")


EAGER_GRAPHS = ("off", "auto", "on")


def eager_graphs() -> str:
    """``HOCKET_EAGER_GRAPHS`` (default ``off``): whether eager operator calls on GPUs are replayed from CUDA
    graphs that hocket captures itself (:mod:`hocket.ops.eager_graph`). ``off`` (also ``0``): every call is
    issued by the host. ``auto``: where the cost model prices a replay (with its input and output copies)
    below the call issued by the host, and ``plan=None`` weighs both ways for every candidate. ``on`` (also
    ``1``): every call whose plan a graph can capture is replayed. Agreed across ranks."""
    raw_value = os.environ.get("HOCKET_EAGER_GRAPHS", "").strip().lower()
    raw_value = {"0": "off", "1": "on", "": "off", "false": "off", "true": "on"}.get(raw_value, raw_value)
    if raw_value not in EAGER_GRAPHS:
        raise ValueError(f"HOCKET_EAGER_GRAPHS={raw_value!r} must be one of {EAGER_GRAPHS} (or 0 / 1)")
    return raw_value


@contextmanager
def overridden(values: Mapping[str, str | None]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block (None unsets a variable), then restore what was there
    (also on an exception); hocket reads its settings at call time, so the block runs with them."""
    saved = {k: os.environ.get(k) for k in values}
    _apply(values)
    try:
        yield
    finally:
        _apply(saved)


def _apply(values: Mapping[str, str | None]) -> None:
    for k, v in values.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
