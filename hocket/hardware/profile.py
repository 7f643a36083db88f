"""Calibration profiles: measured points of one machine, JSON on disk, keyed by fingerprint.

Where: ``<dir>/<fingerprint hash>.json`` with ``<dir>`` = ``--profile-dir`` or
``hocket.env.cache_dir()/profiles``; ``HOCKET_PROFILE`` names one file explicitly.

Byte conventions of the curves (match ``Site.comm_bytes``):

* ``collectives["all_gather"]``: bytes of the gathered output per rank;
* ``collectives["reduce_scatter"]``: bytes of the un-scattered input per rank;
* ``collectives["all_reduce"]``: bytes of the reduced tensor;
* ``collectives["all_to_all"]``: bytes one rank sends in total (to all peers);
* ``collectives_steady``: the same collectives (same byte convention) at a few sizes, each sample
  ``reps`` calls back to back (``hocket.timing.timer``): what a call costs in a loop with the host
  ahead, without the launch and release skew that a call from idle behind a barrier pays (2xH200:
  64 MiB all-gather 0.21-0.26 ms from idle, 0.16-0.17 ms back to back). Steady-state predictions
  read these where present; absent in profiles written before it existed. ``collectives_steady["p2p"]``:
  the ``p2p`` exchange timed the same way (same byte convention), where measured;
* ``p2p``: bytes one rank sends to its ring neighbour while receiving as many;
* ``copy_engine``: bytes one rank copies to a peer device; ``host_link``: bytes one way
  between device and pinned host memory;
* ``host_relay``: bytes of the gathered output per rank of an all-gather through the host-staged
  relay (``hocket.transport.host_relay``, as ``transport="host_staged"`` runs it: every rank copies
  device -> shared pinned host memory and host -> device at once, in pipelined messages), timed
  from idle. What the PCIe links of the node give when every rank stages at once in both directions
  (2xH200: 32 MiB per rank each way in ~1.0 ms, against ~0.6 ms for one direction of one GPU
  alone). Absent where not measured (CPU ranks, a single GPU, profiles written before it existed);
* ``host_relay_steady``: the same relay all-gathers timed back to back (a loop's per-call cost: the
  host issues the next call while one runs, so no point holds a call's launch latency, which at small
  sizes is most of a from-idle point). Steady-state predictions read it where present;
* ``host_relay_captured``: the same relay all-gathers captured in a CUDA graph and replayed back to
  back (no host work per call at all: the device's own cost of a relay call, its copies and its
  stream waits on the peers' flags). Predictions of replayed calls read it where present.

``contention`` is keyed by the cost model's transfer kinds (``sm_collective``,
``copy_engine``, ``host_link``, ``cpu_collective``; extra kinds may be present).
``issue_us``: host microseconds to issue one item of GPU work, keyed by
``hocket.cost.issue.ISSUE_OPS`` (``launch``, ``collective``, ``p2p``, ``copy_engine``, ...);
empty on CPU ranks and in profiles written before it existed (the model's defaults apply). Each item is
its median over ``issue_sittings``, the readings of the sittings spread over the calibration (kept for
the record; absent with one sitting and in profiles written before 2026-12-01).
``gemm_sustained``: the grid's fastest whole GEMM timed in a short burst (as the grid is timed) and
run back to back for about two seconds (a training loop's state: the GPU at its power cap, clocks
down); its back-to-back rate ``tflops`` is the sustained ceiling that steady-state predictions hold
every GPU GEMM under (``hocket.cost.compute``). None on CPU ranks and in profiles written before it
existed (steady predictions then use the grid's level).
A corrupt, newer-versioned or foreign profile is reported with a warning naming the
file and the reason, and ignored: never trusted, never unpickled.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import tempfile
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from hocket.core.files import ConfigFileError, load_json_file
from hocket.env import cache_dir, profile_path

PROFILE_VERSION = 1
AUTO = "auto"
"""``load_profile(expected=AUTO)``: accept only a profile of this machine's fingerprint."""


class ProfileWarning(UserWarning):
    """A profile file was found but not used (corrupt, newer, or from another machine)."""


class ProfileFormatError(ValueError):
    """A profile's content does not follow the schema."""


@dataclass(frozen=True, kw_only=True)
class GemmPoint:
    m: int
    k: int
    n: int
    dtype: str
    tflops: float
    ms: float


@dataclass(frozen=True, kw_only=True)
class CurvePoint:
    bytes: int
    ms: float

    @property
    def gbps(self) -> float:
        """Algorithm bandwidth: bytes / time, in GB/s."""
        return self.bytes / (self.ms * 1e6)


@dataclass(frozen=True, kw_only=True)
class ContentionPoint:
    gemm_slowdown: float
    transfer_slowdown: float


@dataclass(frozen=True, kw_only=True)
class SustainedGemm:
    """One GEMM (m, k, n, dtype) per call: ``burst_ms`` timed like the ``gemm`` grid (a few calls
    behind barriers), ``sustained_ms`` per call over the last part of ``duration_s`` seconds of calls
    back to back (``tflops``: that rate)."""

    m: int
    k: int
    n: int
    dtype: str
    burst_ms: float
    sustained_ms: float
    duration_s: float

    @property
    def slowdown(self) -> float:
        """sustained ms over burst ms (above 1 where the GPU clocks down under sustained load)."""
        return self.sustained_ms / self.burst_ms

    @property
    def tflops(self) -> float:
        """The back-to-back throughput: the GPU's sustained (power-capped) GEMM rate."""
        return 2.0 * self.m * self.k * self.n / (self.sustained_ms * 1e9)

    def to_dict(self) -> dict:
        return {"m": self.m, "k": self.k, "n": self.n, "dtype": self.dtype, "burst_ms": self.burst_ms,
                "sustained_ms": self.sustained_ms, "duration_s": self.duration_s}


@dataclass(frozen=True, kw_only=True)
class CalibrationProfile:
    """What ``hocket calibrate`` measured on one machine (see the module docstring)."""

    fingerprint: str
    fingerprint_data: Mapping[str, Any] = field(default_factory=dict)
    world_size: int = 1
    backend: str = "gloo"
    device_type: str = "cpu"
    quick: bool = False
    created: str = ""
    gemm: tuple[GemmPoint, ...] = ()
    collectives: Mapping[str, tuple[CurvePoint, ...]] = field(default_factory=dict)
    collectives_steady: Mapping[str, tuple[CurvePoint, ...]] = field(default_factory=dict)
    p2p: tuple[CurvePoint, ...] = ()
    copy_engine: tuple[CurvePoint, ...] = ()
    host_link: tuple[CurvePoint, ...] = ()
    host_relay: tuple[CurvePoint, ...] = ()
    host_relay_steady: tuple[CurvePoint, ...] = ()
    host_relay_captured: tuple[CurvePoint, ...] = ()
    contention: Mapping[str, ContentionPoint] = field(default_factory=dict)
    issue_us: Mapping[str, float] = field(default_factory=dict)
    issue_sittings: tuple[Mapping[str, float], ...] = ()
    gemm_sustained: SustainedGemm | None = None
    version: int = PROFILE_VERSION

    def to_dict(self) -> dict:
        curve = lambda points: [[p.bytes, p.ms] for p in sorted(points, key=lambda p: (p.bytes, p.ms))]  # noqa: E731
        out = {
            "version": self.version, "fingerprint": self.fingerprint, "fingerprint_data": dict(self.fingerprint_data),
            "world_size": self.world_size, "backend": self.backend, "device_type": self.device_type,
            "quick": self.quick, "created": self.created,
            "gemm": [{"m": p.m, "k": p.k, "n": p.n, "dtype": p.dtype, "tflops": p.tflops, "ms": p.ms}
                     for p in self.gemm],
            "collectives": {op: curve(points) for op, points in sorted(self.collectives.items())},
            "p2p": curve(self.p2p), "copy_engine": curve(self.copy_engine), "host_link": curve(self.host_link),
            "contention": {kind: {"gemm_slowdown": c.gemm_slowdown, "transfer_slowdown": c.transfer_slowdown}
                           for kind, c in sorted(self.contention.items())},
            "issue_us": {op: float(us) for op, us in sorted(self.issue_us.items())},
        }
        if self.collectives_steady:  # absent where not measured (old files read and write the same)
            out["collectives_steady"] = {op: curve(points) for op, points in sorted(self.collectives_steady.items())}
        if self.host_relay:  # absent where not measured (old files read and write the same)
            out["host_relay"] = curve(self.host_relay)
        if self.host_relay_steady:
            out["host_relay_steady"] = curve(self.host_relay_steady)
        if self.host_relay_captured:
            out["host_relay_captured"] = curve(self.host_relay_captured)
        if self.issue_sittings:  # absent with one sitting and in profiles written before it existed
            out["issue_sittings"] = [{op: float(us) for op, us in sorted(s.items())} for s in self.issue_sittings]
        if self.gemm_sustained is not None:  # absent, not null, where not measured (old files read the same)
            out["gemm_sustained"] = self.gemm_sustained.to_dict()
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_dict(cls, data: Any) -> CalibrationProfile:
        """Parse and validate; raises ProfileFormatError saying what is wrong."""
        if not isinstance(data, dict):
            raise ProfileFormatError(f"the top level must be a JSON object, got {type(data).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise ProfileFormatError(f"unknown fields {sorted(unknown)}")
        version = data.get("version")
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ProfileFormatError(f"version={version!r} must be an int >= 1")
        if version > PROFILE_VERSION:
            raise ProfileFormatError(f"version {version} is newer than this hocket reads ({PROFILE_VERSION})")
        fp = data.get("fingerprint")
        if not isinstance(fp, str) or not fp:
            raise ProfileFormatError("fingerprint must be a non-empty string")
        gemm = tuple(_gemm_point(p, i) for i, p in enumerate(_list(data, "gemm")))
        collectives_raw = data.get("collectives", {})
        if not isinstance(collectives_raw, dict):
            raise ProfileFormatError("collectives must be an object {op: [[bytes, ms], ...]}")
        collectives = {str(op): _curve(points, f"collectives.{op}") for op, points in collectives_raw.items()}
        steady_raw = data.get("collectives_steady", {})
        if not isinstance(steady_raw, dict):
            raise ProfileFormatError("collectives_steady must be an object {op: [[bytes, ms], ...]}")
        steady = {str(op): _curve(points, f"collectives_steady.{op}") for op, points in steady_raw.items()}
        contention_raw = data.get("contention", {})
        if not isinstance(contention_raw, dict):
            raise ProfileFormatError("contention must be an object {kind: {gemm_slowdown, transfer_slowdown}}")
        contention = {str(kind): _contention(entry, kind) for kind, entry in contention_raw.items()}
        issue_raw = data.get("issue_us", {})
        if not isinstance(issue_raw, dict):
            raise ProfileFormatError("issue_us must be an object {op: microseconds}")
        issue_us = {str(op): _non_negative(us, f"issue_us.{op}") for op, us in issue_raw.items()}
        sittings_raw = data.get("issue_sittings", [])
        if not isinstance(sittings_raw, list) or not all(isinstance(x, dict) for x in sittings_raw):
            raise ProfileFormatError("issue_sittings must be a list of objects {op: microseconds}")
        sittings = tuple({str(op): _non_negative(us, f"issue_sittings[{i}].{op}") for op, us in x.items()}
                         for i, x in enumerate(sittings_raw))
        sustained_raw = data.get("gemm_sustained")
        sustained = None if sustained_raw is None else _sustained(sustained_raw)
        world = data.get("world_size", 1)
        if not isinstance(world, int) or isinstance(world, bool) or world < 1:
            raise ProfileFormatError(f"world_size={world!r} must be an int >= 1")
        fp_data = data.get("fingerprint_data", {})
        if not isinstance(fp_data, dict):
            raise ProfileFormatError("fingerprint_data must be an object")
        return cls(fingerprint=fp, fingerprint_data=fp_data, world_size=world,
                   backend=str(data.get("backend", "gloo")), device_type=str(data.get("device_type", "cpu")),
                   quick=bool(data.get("quick", False)), created=str(data.get("created", "")), gemm=gemm,
                   collectives=collectives, collectives_steady=steady, p2p=_curve(data.get("p2p", []), "p2p"),
                   copy_engine=_curve(data.get("copy_engine", []), "copy_engine"),
                   host_link=_curve(data.get("host_link", []), "host_link"),
                   host_relay=_curve(data.get("host_relay", []), "host_relay"),
                   host_relay_steady=_curve(data.get("host_relay_steady", []), "host_relay_steady"),
                   host_relay_captured=_curve(data.get("host_relay_captured", []), "host_relay_captured"),
                   contention=contention,
                   issue_us=issue_us, issue_sittings=sittings, gemm_sustained=sustained, version=version)


def _list(data: dict, key: str) -> list:
    value = data.get(key, [])
    if not isinstance(value, list):
        raise ProfileFormatError(f"{key} must be a list")
    return value


def _positive(value: Any, where: str, *, integer: bool = False) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0
    if not ok or (integer and not isinstance(value, int)):
        raise ProfileFormatError(f"{where}={value!r} must be a positive {'int' if integer else 'number'}")
    return value


def _non_negative(value: Any, where: str) -> float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    if not ok:
        raise ProfileFormatError(f"{where}={value!r} must be a finite number >= 0")
    return float(value)


def _gemm_point(p: Any, i: int) -> GemmPoint:
    if not isinstance(p, dict) or set(p) != {"m", "k", "n", "dtype", "tflops", "ms"}:
        raise ProfileFormatError(f"gemm[{i}] must be an object with m, k, n, dtype, tflops, ms")
    if not isinstance(p["dtype"], str):
        raise ProfileFormatError(f"gemm[{i}].dtype must be a dtype name")
    return GemmPoint(m=_positive(p["m"], f"gemm[{i}].m", integer=True), k=_positive(p["k"], f"gemm[{i}].k", integer=True),
                     n=_positive(p["n"], f"gemm[{i}].n", integer=True), dtype=p["dtype"],
                     tflops=_positive(p["tflops"], f"gemm[{i}].tflops"), ms=_positive(p["ms"], f"gemm[{i}].ms"))


def _curve(points: Any, where: str) -> tuple[CurvePoint, ...]:
    if not isinstance(points, list):
        raise ProfileFormatError(f"{where} must be a list of [bytes, ms] pairs")
    out = []
    for i, point in enumerate(points):
        if not isinstance(point, list) or len(point) != 2:
            raise ProfileFormatError(f"{where}[{i}]={point!r} must be a [bytes, ms] pair")
        out.append(CurvePoint(bytes=_positive(point[0], f"{where}[{i}].bytes", integer=True),
                              ms=_positive(point[1], f"{where}[{i}].ms")))
    return tuple(sorted(out, key=lambda p: (p.bytes, p.ms)))


def _contention(entry: Any, kind: str) -> ContentionPoint:
    if not isinstance(entry, dict) or set(entry) != {"gemm_slowdown", "transfer_slowdown"}:
        raise ProfileFormatError(f"contention.{kind} must be an object with gemm_slowdown and transfer_slowdown")
    return ContentionPoint(gemm_slowdown=_positive(entry["gemm_slowdown"], f"contention.{kind}.gemm_slowdown"),
                           transfer_slowdown=_positive(entry["transfer_slowdown"],
                                                       f"contention.{kind}.transfer_slowdown"))


_SUSTAINED_FIELDS = {"m", "k", "n", "dtype", "burst_ms", "sustained_ms", "duration_s"}


def _sustained(entry: Any) -> SustainedGemm:
    if not isinstance(entry, dict) or set(entry) != _SUSTAINED_FIELDS:
        raise ProfileFormatError(f"gemm_sustained must be an object with {sorted(_SUSTAINED_FIELDS)} (or absent)")
    if not isinstance(entry["dtype"], str):
        raise ProfileFormatError("gemm_sustained.dtype must be a dtype name")
    dims = {d: _positive(entry[d], f"gemm_sustained.{d}", integer=True) for d in ("m", "k", "n")}
    return SustainedGemm(**dims, dtype=entry["dtype"],
                         burst_ms=_positive(entry["burst_ms"], "gemm_sustained.burst_ms"),
                         sustained_ms=_positive(entry["sustained_ms"], "gemm_sustained.sustained_ms"),
                         duration_s=_positive(entry["duration_s"], "gemm_sustained.duration_s"))


# -- files ----------------------------------------------------------------------------
def profile_dir(directory: str | Path | None = None) -> Path:
    """``directory`` (the ``--profile-dir`` flag) or ``cache_dir()/profiles``."""
    return Path(directory).expanduser() if directory is not None else cache_dir() / "profiles"


def profile_file(fingerprint_hash: str, directory: str | Path | None = None) -> Path:
    if not isinstance(fingerprint_hash, str) or not fingerprint_hash.isalnum():
        raise ValueError(f"fingerprint_hash={fingerprint_hash!r} must be the short alphanumeric hash "
                         f"from hocket.hardware.fingerprint()['hash']")
    return profile_dir(directory) / f"{fingerprint_hash}.json"


def save_profile(profile: CalibrationProfile, *, path: str | Path | None = None,
                 directory: str | Path | None = None) -> Path:
    """Write ``profile`` atomically to ``path`` or ``<dir>/<fingerprint>.json``; returns the path."""
    target = Path(path).expanduser() if path is not None else profile_file(profile.fingerprint, directory)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(profile.to_json())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def _this_machine_hash() -> str:
    from hocket.hardware.fingerprint import fingerprint

    return fingerprint()["hash"]


def load_profile(path: str | Path | None = None, *, expected: str | None = AUTO,
                 directory: str | Path | None = None) -> CalibrationProfile | None:
    """The calibration profile to use, or None.

    Which file: ``path``, else ``HOCKET_PROFILE``, else ``<dir>/<this machine's hash>.json``.
    ``expected``: the fingerprint hash the profile must carry (``AUTO``: this machine's;
    None: no check). A missing default file gives None quietly; an explicit file that is
    missing, corrupt, newer or foreign gives a ``ProfileWarning`` naming the file and the
    reason, and None.
    """
    want = _this_machine_hash() if expected == AUTO else expected
    explicit = Path(path).expanduser() if path is not None else profile_path()
    if explicit is None:
        if want is None:
            raise ValueError("load_profile(path=None, expected=None) has no file to read: give a path, "
                             "set HOCKET_PROFILE, or let expected default to this machine's fingerprint")
        target = profile_file(want, directory)
        if not target.is_file():
            return None
    else:
        target = explicit
        if not target.is_file():
            warnings.warn(f"calibration profile {target} does not exist; ignoring it", ProfileWarning, stacklevel=2)
            return None
    try:
        data = load_json_file(target, what="calibration profile")
        profile = CalibrationProfile.from_dict(data)
    except (ConfigFileError, ProfileFormatError) as exc:
        warnings.warn(f"calibration profile {target} is corrupt and is ignored: {exc}", ProfileWarning, stacklevel=2)
        return None
    profile = without_superseded(profile, target)
    if want is not None and profile.fingerprint != want:
        warnings.warn(f"calibration profile {target} is foreign and is ignored: it was measured on hardware with "
                      f"fingerprint {profile.fingerprint}, this one is {want} (run `hocket calibrate` here)",
                      ProfileWarning, stacklevel=2)
        return None
    return profile


SUPERSEDED_BEFORE: Mapping[str, tuple[str, str]] = {
    "copy_engine": ("2026-11-30T03:30:00+00:00",
                    "timed a cross-device copy_ between two processes' GPUs (each call synchronising streams of both "
                    "devices: 0.12 ms floor, x3.1 beside a GEMM), not the DMA copy into a peer's symmetric memory "
                    "that the copy-engine transport runs (0.04 ms floor, x0.96-0.99 beside a GEMM; hocket 0e81fe1; "
                    "benchmarks/results/validation/2026-12-01_measured-rules.md)"),
    "issue_us.copy_engine": ("2026-11-30T03:45:00+00:00",
                             "timed a plain cross-device copy, not the symmetric-memory copy with its event that the "
                             "transport issues (hocket f1fa3b5)"),
}
"""Parts of a profile measured, before the given ``created`` time, by a method that timed another mechanism than
the one the cost model prices with them, and why. :func:`load_profile` drops them (the model's defaults apply)."""


def without_superseded(profile: CalibrationProfile, source: str | Path = "profile") -> CalibrationProfile:
    """``profile`` without the parts :data:`SUPERSEDED_BEFORE` names for its ``created`` time, with a
    ``ProfileWarning`` naming the file, the parts and why; unchanged when it has none or no ``created`` time."""
    created = _created(profile.created)
    if created is None:
        return profile
    dropped, changes = [], {}
    for part, (before, why) in SUPERSEDED_BEFORE.items():
        if created >= _created(before):
            continue
        if part == "copy_engine" and (profile.copy_engine or "copy_engine" in profile.contention):
            changes["copy_engine"] = ()
            changes["contention"] = {k: v for k, v in profile.contention.items() if k != "copy_engine"}
            dropped.append(f"copy_engine curve and contention ({why})")
        elif part == "issue_us.copy_engine" and "copy_engine" in profile.issue_us:
            changes["issue_us"] = {k: v for k, v in profile.issue_us.items() if k != "copy_engine"}
            dropped.append(f"issue_us['copy_engine'] ({why})")
    if not dropped:
        return profile
    warnings.warn(f"calibration profile {source} (created {profile.created}) has measurements of superseded methods; "
                  f"ignoring its {'; its '.join(dropped)}. Run `hocket calibrate` again to measure them as the model "
                  f"prices them", ProfileWarning, stacklevel=3)
    return replace(profile, **changes)


def _created(text: str) -> datetime.datetime | None:
    try:
        stamp = datetime.datetime.fromisoformat(text)
    except (TypeError, ValueError):
        return None
    return stamp if stamp.tzinfo is not None else stamp.replace(tzinfo=datetime.timezone.utc)
