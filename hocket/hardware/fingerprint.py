"""Hardware fingerprint shared by calibration profiles and the autotune cache.

It covers what changes measured times: device models and counts, link topology, GPU
driver, NCCL (or HIP/CUDA) version, torch version and the transport-affecting
environment (``hocket.env.transport_environment()``). Figures that do not change
timings (free memory, hostnames, timestamps) stay out, so the hash is stable.
"""

from __future__ import annotations

import hashlib
import json

from hocket.env import transport_environment
from hocket.hardware.spec import ClusterSpec

FINGERPRINT_VERSION = 1
HASH_CHARS = 16


def runtime_versions() -> dict[str, str | None]:
    """torch, CUDA/HIP, NCCL and driver versions of this process (None where absent)."""
    import torch

    from hocket.hardware.detect import driver_version

    nccl = None
    if torch.cuda.is_available() and hasattr(torch.cuda, "nccl"):
        raw = torch.cuda.nccl.version()
        nccl = ".".join(str(p) for p in raw) if isinstance(raw, tuple) else str(raw)
    return {
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "hip": getattr(torch.version, "hip", None),
        "nccl": nccl,
        "driver": driver_version() if torch.cuda.is_available() else None,
    }


def fingerprint(cluster: ClusterSpec | None = None) -> dict:
    """The fingerprint of ``cluster`` (default: ``probe()`` of this machine) in this process.

    The returned dict holds a ``"hash"`` entry: ``fingerprint_hash`` of the rest.
    """
    if cluster is None:
        from hocket.hardware.detect import probe

        cluster = probe()
    data = {
        "version": FINGERPRINT_VERSION,
        "devices": dict(sorted(cluster.device_counts().items())),
        "world_size": cluster.world_size,
        "nodes": cluster.num_nodes,
        "topology": cluster.topology_summary(),
        "network_transports": sorted(cluster.network_transports),
        "env": dict(sorted(transport_environment().items())),
        "versions": runtime_versions(),
    }
    if cluster.vendors() == {"cpu"}:
        data["cpu_cores"] = [group.node.cpu_cores for group in cluster.groups]
    data["hash"] = fingerprint_hash(data)
    return data


def fingerprint_hash(data: dict) -> str:
    """A short stable hash of a fingerprint dict (its ``"hash"`` entry is ignored)."""
    payload = {k: v for k, v in data.items() if k != "hash"}
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_CHARS]
