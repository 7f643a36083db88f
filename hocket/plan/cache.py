"""On-disk cache of plan decisions (JSON, never pickle).

One file (default ``hocket.env.cache_dir() / "plans.json"``) maps
(site key, hardware fingerprint, hocket version, torch version) to a Plan plus how it
was decided (measured times when autotuned). Rules:

* writes are atomic: a temporary file in the same folder, fsync, ``os.replace``; the
  read-merge-write runs under an advisory lock file, so two ranks or two jobs writing
  at once never tear the file and never drop each other's entries;
* a corrupt file (bad JSON, not UTF-8, over :data:`MAX_CACHE_BYTES`, wrong format or schema, a
  malformed entry) is reported with a :class:`PlanCacheWarning`, moved aside to ``<name>.corrupt``
  and rebuilt; nothing in it is trusted;
* an entry for the same site made in another environment (other hardware, driver,
  transport environment, hocket or torch version) is ignored with a warning;
* a cache that cannot be read or written at all (its folder cannot be created, the path is a
  directory or lies below a regular file, a read-only or full disk) never fails a call: one
  :class:`PlanCacheWarning` names the path and the problem, and the cache object then keeps its
  decisions in memory only (hocket plans without the file).
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
import time
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from hocket.core.files import ConfigFileError, read_bounded
from hocket.core.plan import Plan

CACHE_FORMAT = "hocket-plan-cache"
CACHE_SCHEMA_VERSION = 1
CACHE_FILENAME = "plans.json"
SOURCES = ("autotune", "predicted")
MAX_CACHE_BYTES = 64 * 2**20
"""a cache file larger than this is treated as corrupt (a decision is ~1 KiB: 64 MiB is ~60k sites)."""


class PlanCacheWarning(UserWarning):
    """A cache file was corrupt, or an entry came from another environment."""


@dataclass(frozen=True, kw_only=True)
class CacheEnvironment:
    """What a cached decision is only valid for."""

    fingerprint: str
    """short hash of the hardware fingerprint (devices, driver, NCCL, topology, transport env)."""
    hocket_version: str
    torch_version: str

    def __post_init__(self) -> None:
        for name in ("fingerprint", "hocket_version", "torch_version"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise ValueError(f"CacheEnvironment.{name}={value!r} must be a non-empty string")

    @property
    def token(self) -> str:
        return f"hw={self.fingerprint};hocket={self.hocket_version};torch={self.torch_version}"

    def to_dict(self) -> dict:
        return {"fingerprint": self.fingerprint, "hocket_version": self.hocket_version,
                "torch_version": self.torch_version}

    @classmethod
    def from_dict(cls, data: Mapping) -> CacheEnvironment:
        return cls(fingerprint=data["fingerprint"], hocket_version=data["hocket_version"],
                   torch_version=data["torch_version"])


def current_environment(fingerprint: str) -> CacheEnvironment:
    """This process's environment for a given hardware fingerprint hash."""
    import torch

    from hocket.core.version import __version__

    return CacheEnvironment(fingerprint=fingerprint, hocket_version=__version__,
                            torch_version=str(torch.__version__))


@dataclass(frozen=True, kw_only=True)
class CacheEntry:
    """One cached decision."""

    site_key: str
    plan: Plan
    environment: CacheEnvironment
    source: str
    """``autotune`` (measured on the live group) or ``predicted`` (cost model only)."""
    timings_ms: Mapping[str, float] = field(default_factory=dict)
    """measured median ms per candidate (plan JSON -> ms), when autotuned."""
    created_unix_s: float = 0.0

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise ValueError(f"CacheEntry.source={self.source!r} must be one of {SOURCES}")
        if not isinstance(self.site_key, str) or not self.site_key:
            raise ValueError(f"CacheEntry.site_key={self.site_key!r} must be a non-empty string (Site.key)")
        timings = {}
        for plan_json, ms in dict(self.timings_ms).items():
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not ms >= 0:
                raise ValueError(f"CacheEntry.timings_ms[{plan_json!r}]={ms!r} must be a number >= 0")
            timings[str(plan_json)] = float(ms)
        object.__setattr__(self, "timings_ms", timings)

    @property
    def key(self) -> str:
        return entry_key(self.site_key, self.environment)

    def to_dict(self) -> dict:
        return {"site_key": self.site_key, "plan": self.plan.to_dict(), "environment": self.environment.to_dict(),
                "source": self.source, "timings_ms": dict(self.timings_ms), "created_unix_s": self.created_unix_s}

    @classmethod
    def from_dict(cls, data: Mapping) -> CacheEntry:
        return cls(site_key=data["site_key"], plan=Plan.from_dict(data["plan"]),
                   environment=CacheEnvironment.from_dict(data["environment"]), source=data["source"],
                   timings_ms=data.get("timings_ms", {}), created_unix_s=float(data.get("created_unix_s", 0.0)))


def entry_key(site_key: str, environment: CacheEnvironment) -> str:
    return f"{site_key}|{environment.token}"


def default_cache_path() -> Path:
    from hocket.env import cache_dir

    return cache_dir() / CACHE_FILENAME


class CorruptCacheError(ValueError):
    """Raised internally when a cache file cannot be trusted."""


def parse_cache(text: str) -> dict[str, CacheEntry]:
    """Entries of a cache file's text; raises CorruptCacheError naming what is wrong."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise CorruptCacheError(f"not valid JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != CACHE_FORMAT:
        raise CorruptCacheError(f"not a hocket plan cache (expected \"format\": \"{CACHE_FORMAT}\")")
    if data.get("schema") != CACHE_SCHEMA_VERSION:
        raise CorruptCacheError(f"schema {data.get('schema')!r}, this hocket reads schema {CACHE_SCHEMA_VERSION}")
    raw = data.get("entries")
    if not isinstance(raw, dict):
        raise CorruptCacheError("\"entries\" is missing or not an object")
    entries: dict[str, CacheEntry] = {}
    for key, value in raw.items():
        try:
            entry = CacheEntry.from_dict(value)
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CorruptCacheError(f"entry {key!r} is malformed ({type(exc).__name__}: {exc})") from None
        if entry.key != key:
            raise CorruptCacheError(f"entry {key!r} is filed under the wrong key (its content says {entry.key!r})")
        entries[key] = entry
    return entries


def render_cache(entries: Mapping[str, CacheEntry]) -> str:
    payload = {"format": CACHE_FORMAT, "schema": CACHE_SCHEMA_VERSION,
               "entries": {key: entries[key].to_dict() for key in sorted(entries)}}
    return json.dumps(payload, indent=1, sort_keys=True) + "\n"


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so readers see the old or the new file, never a torn one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


class PlanCache:
    """The on-disk decision cache of one environment (see module docstring).

    Reads load the whole file once and keep it in memory; :meth:`put` re-reads under
    the lock, merges and writes atomically.
    """

    def __init__(self, environment: CacheEnvironment, path: Path | str | None = None) -> None:
        if not isinstance(environment, CacheEnvironment):
            raise TypeError(f"environment must be a CacheEnvironment, got {type(environment).__name__}; "
                            f"build one with hocket.plan.cache.current_environment(fingerprint)")
        self.environment = environment
        self.path = Path(path) if path is not None else default_cache_path()
        self._entries: dict[str, CacheEntry] | None = None
        self._warned: set[str] = set()
        self.unusable: str | None = None
        """why the file is not used any more (an OS error reading or writing it), or None."""

    # -- reading -------------------------------------------------------------
    def _load_unlocked(self) -> dict[str, CacheEntry]:
        if self.path.is_dir():
            raise IsADirectoryError(21, "is a directory, not a plan cache file", str(self.path))
        if not self.path.exists():
            return {}
        try:
            text = read_bounded(self.path, what="plan cache", max_bytes=MAX_CACHE_BYTES)
            return parse_cache(text)
        except (CorruptCacheError, ConfigFileError) as exc:
            problem = str(exc).removeprefix(f"{self.path}: ")
            aside = self.path.with_name(self.path.name + ".corrupt")
            try:
                os.replace(self.path, aside)
                moved = f"moved it to {aside} and rebuilding"
            except OSError as move_exc:
                moved = f"could not move it aside ({move_exc.strerror or move_exc})"
            warnings.warn(f"plan cache {self.path} is corrupt: {problem}; {moved} (nothing in it is used)",
                          PlanCacheWarning, stacklevel=4)
            return {}

    def _fault(self, exc: OSError, doing: str) -> None:
        """Stop using the file after an OS error (warned once): decisions stay in memory only."""
        problem = exc.strerror or str(exc)
        where = exc.filename if exc.filename and str(exc.filename) != str(self.path) else None
        if where is not None:
            problem += f" ({where})"
        if self.unusable is None:
            warnings.warn(f"plan cache {self.path} cannot be used: {doing} it failed with {type(exc).__name__}: "
                          f"{problem}; hocket plans without the cache file (decisions are kept in memory). Point "
                          f"HOCKET_CACHE_DIR at a writable directory to keep them", PlanCacheWarning, stacklevel=4)
        self.unusable = f"{doing}: {type(exc).__name__}: {problem}"

    def entries(self) -> dict[str, CacheEntry]:
        if self._entries is None:
            if self.unusable is not None:
                self._entries = {}
                return self._entries
            try:
                with self._locked():
                    self._entries = self._load_unlocked()
            except OSError as exc:
                self._fault(exc, "reading")
                self._entries = {}
        return self._entries

    def get(self, site_key: str) -> CacheEntry | None:
        """This environment's decision for ``site_key``, or None (foreign entries warn)."""
        entries = self.entries()
        hit = entries.get(entry_key(site_key, self.environment))
        if hit is not None:
            return hit
        foreign = [e for e in entries.values() if e.site_key == site_key]
        if foreign and site_key not in self._warned:
            self._warned.add(site_key)
            others = "; ".join(sorted({e.environment.token for e in foreign}))
            warnings.warn(f"plan cache {self.path} has an entry for {site_key} made in another environment "
                          f"({others}); this one is {self.environment.token}; ignoring it and planning afresh",
                          PlanCacheWarning, stacklevel=2)
        return None

    # -- writing -------------------------------------------------------------
    def put(self, site_key: str, plan: Plan, *, source: str, timings_ms: Mapping[str, float] | None = None
            ) -> CacheEntry:
        """Record a decision for this environment and write the file atomically."""
        entry = CacheEntry(site_key=site_key, plan=plan, environment=self.environment, source=source,
                           timings_ms=timings_ms or {}, created_unix_s=time.time())
        entries = None
        if self.unusable is None:
            try:
                with self._locked():
                    entries = self._load_unlocked()
                    entries[entry.key] = entry
                    write_atomic(self.path, render_cache(entries))
            except OSError as exc:
                self._fault(exc, "writing")
                entries = None
        if entries is None:
            entries = dict(self._entries or {})
            entries[entry.key] = entry
        self._entries = entries
        return entry

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        lock_path = self.path.with_name(self.path.name + ".lock")
        with open(lock_path, "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)
