"""Every environment flag hocket reads lives here (DESIGN.md house rules)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

TRANSPORT_ENV_VARS = (
    "NCCL_P2P_DISABLE", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE", "NCCL_NVLS_ENABLE", "NCCL_ALGO",
    "NCCL_PROTO", "NCCL_MIN_NCHANNELS", "NCCL_MAX_NCHANNELS", "NCCL_SOCKET_IFNAME",
    "TORCH_SYMM_MEM_DISABLE_MULTICAST", "TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP", "NVSHMEM_DISABLE_NVLS",
    "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "GLOO_SOCKET_IFNAME", "HOCKET_HOST_STAGE_PIECE_MB",
    "HOCKET_HOST_STAGE_THREAD", "HOCKET_PEER_PROTOCOL", "HOCKET_HOST_STAGE_SIGNAL",
    "HOCKET_HOST_STAGE_PIPELINE", "HOCKET_HOST_STAGE_SLOTS", "HOCKET_HOST_STAGE_CALLS", "HOCKET_OWN_BLOCK_ZERO",
    "HOCKET_OWN_BLOCK_SUM",
)


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def disabled() -> bool:
    """``HOCKET_DISABLE=1`` forces the sequential plan everywhere."""
    return _flag("HOCKET_DISABLE")


def autotune_env() -> bool | None:
    """``HOCKET_AUTOTUNE``: 1 on, 0 off, unset -> None (API default decides)."""
    raw = os.environ.get("HOCKET_AUTOTUNE")
    if raw is None or raw.strip() == "":
        return None
    return raw.strip().lower() in ("1", "true", "yes", "on")


def cache_dir() -> Path:
    """Where profiles and autotune caches live: ``HOCKET_CACHE_DIR`` or the XDG cache dir."""
    raw = os.environ.get("HOCKET_CACHE_DIR")
    if raw:
        return Path(raw).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "hocket"


def profile_path() -> Path | None:
    """``HOCKET_PROFILE``: an explicit calibration profile JSON to use."""
    raw = os.environ.get("HOCKET_PROFILE")
    return Path(raw).expanduser() if raw else None


def agreement_check() -> bool:
    """``HOCKET_AGREEMENT=0`` skips the first-call cross-rank descriptor check (not advised)."""
    return os.environ.get("HOCKET_AGREEMENT", "1").strip() != "0"


def agreement_every_call() -> bool:
    """``HOCKET_AGREEMENT=always`` runs the cross-rank descriptor check on every call, not only the first
    (catches a rank that diverges after the first call with a clear error instead of a timeout; costs one
    small collective per call)."""
    return os.environ.get("HOCKET_AGREEMENT", "1").strip().lower() == "always"


def wait_timeout_s() -> float:
    """Bound on any wait hocket performs itself (``HOCKET_TIMEOUT_S``, default 300 s)."""
    return float(os.environ.get("HOCKET_TIMEOUT_S", "300"))


def git_hash_env() -> str | None:
    """``HOCKET_GIT_HASH``: the commit results lines record instead of asking git (unset: ask git).
    For machines that run a copy of the tree whose ``.git`` is stale (device machines): set it to the
    commit the copy was made from, e.g. ``HOCKET_GIT_HASH=$(git rev-parse HEAD)`` where it was made."""
    raw = os.environ.get("HOCKET_GIT_HASH", "").strip()
    if any(c.isspace() for c in raw):
        raise ValueError(f"HOCKET_GIT_HASH={raw!r} must be one commit id without spaces, e.g. $(git rev-parse HEAD)")
    return raw or None


def transport_environment() -> dict[str, str]:
    """The transport-affecting environment, recorded in fingerprints and results."""
    return {k: os.environ[k] for k in TRANSPORT_ENV_VARS if k in os.environ}


def cluster_env() -> str | None:
    """``HOCKET_CLUSTER``: a cluster preset name or YAML path describing where this job runs
    (the live planner's cluster; default: ``hocket.hardware.probe()`` of this machine)."""
    raw = os.environ.get("HOCKET_CLUSTER", "").strip()
    return raw or None


def symm_mailbox_bytes() -> int:
    """``HOCKET_SYMM_MAILBOX_MB``: size of the symmetric-memory staging area the ``copy_engine``
    transport reserves once per (group, device) for its collectives (default 256 MiB)."""
    raw = os.environ.get("HOCKET_SYMM_MAILBOX_MB", "").strip()
    megabytes = float(raw) if raw else 256.0
    if not megabytes > 0:
        raise ValueError(f"HOCKET_SYMM_MAILBOX_MB={raw!r} must be a positive number of MiB, e.g. 256")
    return int(megabytes * 2**20)


def host_stage_piece_bytes() -> int:
    """``HOCKET_HOST_STAGE_PIECE_MB``: the most bytes one host-staged message moves (default 8 MiB).
    A collective is cut into messages of at most this size (the first two smaller, a ramp), so the
    device-to-host copy of one message overlaps the host-to-device copy of the one before."""
    raw = os.environ.get("HOCKET_HOST_STAGE_PIECE_MB", "").strip()
    megabytes = float(raw) if raw else 8.0
    if not megabytes > 0:
        raise ValueError(f"HOCKET_HOST_STAGE_PIECE_MB={raw!r} must be a positive number of MiB, e.g. 8")
    return max(1, int(megabytes * 2**20))


def host_stage_issue_thread() -> bool:
    """``HOCKET_HOST_STAGE_THREAD``: 1 issues host-staged messages on a background thread per relay, so
    the launching thread never waits for a peer; 0 (default: measured faster on 2xH200, the thread's
    polling latency starved the copy streams) issues them on the calling thread."""
    raw = os.environ.get("HOCKET_HOST_STAGE_THREAD", "0").strip()
    if raw not in ("0", "1"):
        raise ValueError(f"HOCKET_HOST_STAGE_THREAD={raw!r} must be 0 or 1")
    return raw == "1"


def _choice(name: str, choices: tuple[str, ...]) -> str:
    """Environment variable ``name``: one of ``choices`` (case and spaces ignored), the first when unset
    or empty; anything else is an error naming the variable, the value and the choices."""
    raw = os.environ.get(name, "").strip().lower() or choices[0]
    if raw not in choices:
        raise ValueError(f"{name}={raw!r} must be one of {choices}")
    return raw


HOST_STAGE_SIGNALS = ("device", "host")


def host_stage_signal() -> str:
    """``HOCKET_HOST_STAGE_SIGNAL``: how the ranks of the multi-process ``host_staged`` relay tell each
    other that a message landed in, or was read out of, the shared host buffer. ``device`` (default):
    the copy streams write and wait for sequence numbers in that buffer themselves (CUDA stream memory
    operations), so no thread waits for a peer; ``host``: the calling thread publishes and polls them
    and orders the streams with inter-process events (the relay of runs 5-20)."""
    return _choice("HOCKET_HOST_STAGE_SIGNAL", HOST_STAGE_SIGNALS)


HOST_STAGE_PIPELINES = ("message", "batch")


def host_stage_pipeline() -> str:
    """``HOCKET_HOST_STAGE_PIPELINE``: what the host-to-device copies of the device-signalled relay wait
    for besides the peers' "sent" numbers. ``message`` (default): nothing else, so each message is
    read as soon as every peer wrote it and the two copy directions overlap message by message; only
    the call's ``finish`` (an all-reduce's sum overwrites what it sent) waits for this rank's own
    device-to-host copies. ``batch``: each batch of ``SLOTS`` messages is read only after this rank's
    own copies of that batch ended (the relay of runs 26-27: a pipeline of batches)."""
    return _choice("HOCKET_HOST_STAGE_PIPELINE", HOST_STAGE_PIPELINES)


HOST_STAGE_CALLS = ("one", "piece")


def host_stage_calls() -> str:
    """``HOCKET_HOST_STAGE_CALLS``: how an own-data-first ``chunked`` pipeline (``order="local_first"``)
    moves its pieces over the multi-process ``host_staged`` relay. ``one`` (default): one relay call for
    the whole transfer, its messages cut at the pieces' edges; an all-gather's GEMM of a piece waits on
    an event recorded after the piece's last message landed, a reduce-scatter's message waits on the
    GEMM of its piece, so the host pays one call however many pieces there are. ``piece``: one relay
    call per piece (runs 1-33; each call costs its own host time)."""
    return _choice("HOCKET_HOST_STAGE_CALLS", HOST_STAGE_CALLS)


OWN_BLOCK_ZERO = ("once", "each")


def own_block_zero() -> str:
    """``HOCKET_OWN_BLOCK_ZERO``: how matmul + reduce-scatter with ``order="local_first"`` over a
    collective transport keeps this rank's block of each piece's staging at zero. ``once`` (default):
    the buffers are zeroed when made and that block is never written, so a piece's GEMM follows the
    previous one at once. ``each``: a fill kernel before every piece's GEMM (runs up to 59): replayed,
    the previous piece's collective then races that GEMM for the SMs (``hocket.cost.stages.RACE_MS``)."""
    return _choice("HOCKET_OWN_BLOCK_ZERO", OWN_BLOCK_ZERO)


OWN_BLOCK_SUMS = ("epilogue", "pass")


def own_block_sum() -> str:
    """``HOCKET_OWN_BLOCK_SUM``: how the one-piece copy-engine matmul + reduce-scatter (the ``pull``
    protocol) adds the partials its peers computed for this rank's block. ``epilogue`` (default): most
    of them land straight in the output before this rank's GEMM of those rows, which adds them in its
    epilogue (``addmm_``); a small pass adds the rest, the cut chosen by :mod:`hocket.cost.epilogue`;
    ``epilogue@N``: the same with ``N`` plain rows (a multiple of 128, for measurements). ``pass``: the
    whole own block is multiplied first and every partial added in a separate pass after it (before
    session 18)."""
    raw = os.environ.get("HOCKET_OWN_BLOCK_SUM", "").strip().lower() or OWN_BLOCK_SUMS[0]
    if raw in OWN_BLOCK_SUMS:
        return raw
    mode, _, rows = raw.partition("@")
    if mode == "epilogue" and rows.isdigit() and int(rows) > 0 and int(rows) % 128 == 0:
        return raw
    raise ValueError(f"HOCKET_OWN_BLOCK_SUM={raw!r} must be one of {OWN_BLOCK_SUMS} or 'epilogue@N' with N plain "
                     f"rows, a positive multiple of 128 (e.g. epilogue@512)")


def host_stage_slots() -> int:
    """``HOCKET_HOST_STAGE_SLOTS``: message slots per rank in the host-staged relay's shared buffer
    (default 4, at most 64; each slot holds ``HOCKET_SYMM_MAILBOX_MB`` / slots). A rank's
    device-to-host copy into a slot waits until every peer has read the slot's previous message, so
    more slots let a rank run further ahead of a late peer."""
    raw = os.environ.get("HOCKET_HOST_STAGE_SLOTS", "").strip()
    try:
        slots = int(raw) if raw else 4
    except ValueError:
        slots = 0
    if not 1 <= slots <= 64:
        raise ValueError(f"HOCKET_HOST_STAGE_SLOTS={raw!r} must be a whole number of slots from 1 to 64, e.g. 8")
    return slots


def host_stage_dir() -> Path:
    """``HOCKET_HOST_STAGE_DIR``: where the multi-process ``host_staged`` transport puts its shared,
    pinned host buffers (default ``/dev/shm``: pages that every process of the node can register)."""
    raw = os.environ.get("HOCKET_HOST_STAGE_DIR", "").strip()
    return Path(raw).expanduser() if raw else Path("/dev/shm")


EAGER_GRAPHS = ("off", "auto", "on")


def eager_graphs() -> str:
    """``HOCKET_EAGER_GRAPHS``: whether eager operator calls on GPUs are replayed from CUDA graphs that
    hocket captures itself (:mod:`hocket.ops.eager_graph`). ``off`` (default, also ``0``): every call is
    issued by the host. ``auto``: where the cost model prices a replay (with its input and output copies)
    below the call issued by the host, and ``plan=None`` weighs both ways for every candidate. ``on``
    (also ``1``): every call whose plan a graph can capture is replayed."""
    raw = os.environ.get("HOCKET_EAGER_GRAPHS", "").strip().lower()
    raw = {"0": "off", "1": "on", "": "off", "false": "off", "true": "on"}.get(raw, raw)
    if raw not in EAGER_GRAPHS:
        raise ValueError(f"HOCKET_EAGER_GRAPHS={raw!r} must be one of {EAGER_GRAPHS} (or 0 / 1)")
    return raw


def eager_graphs_max() -> int:
    """``HOCKET_EAGER_GRAPHS_MAX``: how many calls' graphs a process keeps (default 32); each holds its
    own memory pool (the call's inputs, outputs and scratch), so calls of further signatures run eagerly."""
    raw = os.environ.get("HOCKET_EAGER_GRAPHS_MAX", "").strip()
    try:
        count = int(raw) if raw else 32
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"HOCKET_EAGER_GRAPHS_MAX={raw!r} must be a whole number of graphs >= 0, e.g. 32")
    return count


PEER_PROTOCOLS = ("auto", "pull", "put", "push")


def peer_protocol() -> str:
    """``HOCKET_PEER_PROTOCOL``: how ``chunked`` over ``copy_engine`` moves data between the GPUs of a
    group: ``pull`` (each rank copies the peers' data out of their symmetric memory after one
    device-side barrier, events order the GEMMs), ``put`` (each rank copies into the peers' memory,
    then the barrier), ``push`` (each rank copies into the peers' memory and raises a flag per
    piece), or ``auto`` (default; see :mod:`hocket.core.peer_protocol`). A protocol the call
    has no form of falls back to ``auto``'s choice."""
    raw = os.environ.get("HOCKET_PEER_PROTOCOL", "auto").strip().lower() or "auto"
    if raw not in PEER_PROTOCOLS:
        raise ValueError(f"HOCKET_PEER_PROTOCOL={raw!r} must be one of {PEER_PROTOCOLS}")
    return raw


@contextmanager
def overridden(values: Mapping[str, str]) -> Iterator[None]:
    """Set ``values`` in ``os.environ`` for the block, then restore what was there (also on an
    exception); hocket reads its flags at call time, so the block runs with them."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
