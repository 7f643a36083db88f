"""The one results schema (docs/validation.md): JSON lines, one measured plan per line.

Every benchmark writes, and the cost-model validation and planner-regret tools read,
only this. A line holds:

* ``site``: kind, m, k, n, dtype, world, direction (per-rank shapes, m k n order);
* ``plan``: the Plan as a dict;
* ``median_ms``, ``p10_ms``, ``p90_ms``, ``n``: the plan's time (max across ranks per iteration);
* ``baselines``: ``sequential_ms``, ``compute_alone_ms``, ``comm_alone_ms`` from the same run
  (and ``comm_alone_transport``, the fastest transport that comm-alone was measured on);
* ``hardware`` (fingerprint), ``environment`` (transport-affecting variables),
  ``versions`` (torch, triton, nccl, driver, hocket), ``git_hash``, ``command``;
* ``executor``: the version of the executors that ran the line (:func:`executor_version`), so a reader can tell
  which executor a line measured without guessing from where it is stored (absent from lines written before the
  field existed: ``None`` on read);
* derived and descriptive fields: ``overlap_efficiency``, ``speedup``, ``metric``, ``hidden_fraction``,
  ``max_error`` (relative to the reference's largest magnitude), ``run`` (backend, threads per rank, ...), ``schema``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from hocket.bench.efficiency import overlap_score
from hocket.bench.outcome import SiteOutcome
from hocket.bench.provenance import Provenance
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.core.version import __version__
from hocket.timing.stats import Summary

SCHEMA = "hocket.bench/1"
SITE_KEYS = ("kind", "m", "k", "n", "dtype", "world", "direction")
BASELINE_KEYS = ("sequential_ms", "compute_alone_ms", "comm_alone_ms")
REQUIRED_KEYS = ("site", "plan", "median_ms", "p10_ms", "p90_ms", "n", "baselines", "hardware", "environment",
                 "versions", "git_hash", "command")
VERSION_KEYS = ("torch", "triton", "nccl", "driver", "hocket")

EXECUTOR_REVISION = 1
"""The revision of what the executors run (``hocket.ops.lowering``, the transports they drive). Bump it in the
commit that changes what a plan executes (a protocol, a relay's signalling or calls, how a piece is summed), and say
in that commit what changed; the analysis scripts price a line by the revision it names. Revision 1 is the executors
of commits dd970ed (2xH200) and b9c1cf6 (1xH200) on (device-signalled relay, one relay call per
own-data-first pipeline, the own block zeroed once, the pull reduce-scatter's epilogue sum)."""


def executor_version(revision: int = EXECUTOR_REVISION) -> str:
    """The ``executor`` field of a results line: ``"hocket <version>+exec.<revision>"``."""
    return f"hocket {__version__}+exec.{revision}"


def executor_revision(executor: str | None) -> int | None:
    """The revision an ``executor`` field names (:func:`executor_version`), or None for a line without one."""
    if not executor:
        return None
    _, sep, revision = str(executor).rpartition("+exec.")
    if not sep or not revision.isdigit():
        raise ValueError(f"executor={executor!r} is not an executor version; expected e.g. {executor_version()!r}")
    return int(revision)


@dataclass(frozen=True, kw_only=True)
class Baselines:
    """The three reference times every plan's time is judged against (same run)."""

    sequential_ms: float
    compute_alone_ms: float
    comm_alone_ms: float
    comm_alone_transport: str = "collective"
    """the (fastest) transport ``comm_alone_ms`` was measured on."""

    def times_ms(self) -> dict[str, float]:
        return {"sequential_ms": self.sequential_ms, "compute_alone_ms": self.compute_alone_ms,
                "comm_alone_ms": self.comm_alone_ms}

    def to_dict(self) -> dict:
        return {**self.times_ms(), "comm_alone_transport": self.comm_alone_transport}


@dataclass(frozen=True, kw_only=True)
class BenchRecord:
    """One results line: a site, a plan, its time, baselines and provenance."""

    site: Site
    plan: Plan
    timing: Summary
    baselines: Baselines
    hardware: dict
    environment: dict
    versions: dict
    git_hash: str | None
    command: str
    max_error: float | None = None
    run: dict = field(default_factory=dict)
    executor: str | None = None
    """the executors' version (:func:`executor_version`); None for lines written before the field existed."""

    @property
    def median_ms(self) -> float:
        return self.timing.median_ms

    def score(self):
        """The overlap score (efficiency, or speedup when the possible saving is < 15%)."""
        return overlap_score(measured_ms=self.timing.median_ms, **self.baselines.times_ms())

    def to_dict(self) -> dict:
        score = self.score()
        site = self.site.to_dict()
        return {
            "schema": SCHEMA,
            "site": {key: site[key] for key in SITE_KEYS},
            "plan": self.plan.to_dict(),
            **self.timing.to_dict(),
            "baselines": self.baselines.to_dict(),
            "overlap_efficiency": None if math.isnan(score.overlap_efficiency) else score.overlap_efficiency,
            "speedup": score.speedup,
            "hidden_fraction": score.hidden_fraction,
            "metric": score.metric,
            "max_error": self.max_error,
            "hardware": self.hardware,
            "environment": self.environment,
            "versions": self.versions,
            "git_hash": self.git_hash,
            "command": self.command,
            "run": self.run,
            "executor": self.executor,
        }

    def to_json_line(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_dict(cls, data: dict, *, where: str = "record") -> BenchRecord:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: a JSON object was expected, got {type(data).__name__}")
        missing = [key for key in REQUIRED_KEYS if key not in data]
        if missing:
            raise ValueError(f"{where}: fields {missing} are missing; a results line needs {list(REQUIRED_KEYS)}")
        site_data, baselines = data["site"], data["baselines"]
        if not isinstance(site_data, dict) or any(key not in site_data for key in SITE_KEYS):
            raise ValueError(f"{where}: 'site' must hold {list(SITE_KEYS)}, got {site_data!r}")
        if not isinstance(baselines, dict) or any(key not in baselines for key in BASELINE_KEYS):
            raise ValueError(f"{where}: 'baselines' must hold {list(BASELINE_KEYS)}, got {baselines!r}")
        try:
            site = Site.from_dict({key: site_data[key] for key in SITE_KEYS})
            plan = Plan.from_dict(data["plan"])
            timing = Summary(median_ms=float(data["median_ms"]), p10_ms=float(data["p10_ms"]),
                             p90_ms=float(data["p90_ms"]), n=int(data["n"]))
            base = Baselines(**{key: float(baselines[key]) for key in BASELINE_KEYS},
                             comm_alone_transport=str(baselines.get("comm_alone_transport", "collective")))
            executor = data.get("executor")
            executor_revision(executor)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{where}: {exc}") from None
        return cls(site=site, plan=plan, timing=timing, baselines=base, hardware=data["hardware"],
                   environment=data["environment"], versions=data["versions"], git_hash=data["git_hash"],
                   command=data["command"], max_error=data.get("max_error"), run=data.get("run", {}),
                   executor=executor)


def make_record(*, site: Site, plan: Plan, timing: Summary, baselines: Baselines, provenance: Provenance,
                max_error: float | None = None) -> BenchRecord:
    return BenchRecord(site=site, plan=plan, timing=timing, baselines=baselines, hardware=provenance.hardware,
                       environment=provenance.environment, versions=provenance.versions,
                       git_hash=provenance.git_hash, command=provenance.command, max_error=max_error,
                       run=provenance.extra, executor=executor_version())


def records_from_outcome(outcome: SiteOutcome, provenance: Provenance) -> list[BenchRecord]:
    """One line per timed plan of a measured site (plans that failed their check are not timed)."""
    sequential = outcome.sequential
    if sequential is None:
        raise ValueError(f"site {outcome.site.key} has no timed sequential plan; every results line needs its time")
    baselines = Baselines(sequential_ms=sequential.timing.median_ms,
                          compute_alone_ms=outcome.compute_alone.median_ms,
                          comm_alone_ms=outcome.comm_alone.median_ms, comm_alone_transport=outcome.comm_transport)
    return [make_record(site=outcome.site, plan=p.plan, timing=p.timing, baselines=baselines,
                        provenance=provenance, max_error=p.max_error)
            for p in outcome.plans if p.timing is not None]


def write_records(path: str | Path, records, *, append: bool = True) -> Path:
    """Write records as JSON lines (appending by default, so runs accumulate)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a" if append else "w", encoding="utf-8") as handle:
        for record in records:
            handle.write(record.to_json_line() + "\n")
    return path


def read_records(path: str | Path) -> list[BenchRecord]:
    """Read and validate every line of a results file; errors name the file and line."""
    path = Path(path)
    records = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            where = f"{path}:{number}"
            try:
                data = json.loads(line)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{where}: not valid JSON ({exc}); each line must be one results object") from None
            records.append(BenchRecord.from_dict(data, where=where))
    return records
