"""Measuring operators honestly (docs/validation.md, how a results line is measured).

* timing (:mod:`hocket.timing`): samples behind barriers, max across ranks, median / p10 / p90 / n;
* ``efficiency``: overlap efficiency, and the speedup rule when overlap could save < 15%;
* ``baselines``: compute-alone (``torch.mm``) and comm-alone (the collective) callables;
* ``workload``: random per-rank operands in the shape convention;
* ``record``: the one JSON-lines results schema, writer and reader;
* ``provenance``: versions, git hash, environment, hardware fingerprint, command;
* ``table``: the rich table printed by ``hocket bench`` and ``hocket demo``.
"""

from hocket.bench.efficiency import OverlapScore, overlap_score
from hocket.bench.record import BenchRecord, read_records, write_records

__all__ = ["BenchRecord", "OverlapScore", "overlap_score", "read_records", "write_records"]
