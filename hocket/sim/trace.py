"""Chrome-trace / Perfetto JSON export of a Timeline (deterministic: same input, same bytes).

One process (``pid``) per owner (a rank or a class of identical ranks, e.g. a pipeline
stage), one thread (``tid``) per resource of that owner. Every task becomes one complete
event (``ph: "X"``) per resource it used, with ``ts``/``dur`` in microseconds and the
task's metadata (site name, plan, ...) under ``args``. Process and thread names are
metadata events (``ph: "M"``), as the format expects.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path

from hocket.sim.engine import Timeline

_US_DECIMALS = 3  # nanosecond resolution; rounding keeps the bytes stable


def _us(ms: float) -> float:
    return round(ms * 1000.0, _US_DECIMALS)


def _thread_ids(timeline: Timeline) -> list[int]:
    """tid of each resource: its index among its owner's resources."""
    tids: list[int] = []
    per_owner_count = [0] * len(timeline.graph.owner_names)
    for owner in timeline.graph.resource_owner:
        tids.append(per_owner_count[owner])
        per_owner_count[owner] += 1
    return tids


def _metadata_events(timeline: Timeline, tids: list[int]) -> list[dict]:
    g = timeline.graph
    events: list[dict] = []
    for pid, name in enumerate(g.owner_names):
        events.append({"args": {"name": name}, "name": "process_name", "ph": "M", "pid": pid, "tid": 0})
        events.append({"args": {"sort_index": pid}, "name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0})
    for r, kind in enumerate(g.resource_kind):
        pid = g.resource_owner[r]
        events.append({"args": {"name": kind}, "name": "thread_name", "ph": "M", "pid": pid, "tid": tids[r]})
        events.append({"args": {"sort_index": tids[r]}, "name": "thread_sort_index", "ph": "M", "pid": pid,
                       "tid": tids[r]})
    return events


def trace_json(timeline: Timeline, *, metadata: Mapping[str, object] | None = None) -> str:
    """The trace as compact JSON, byte-stable for the same timeline.

    Written directly (not through one big ``json.dumps``) so a step of a few hundred
    thousand tasks exports in seconds: names, kinds and the shared metadata mappings of
    repeated tasks are encoded once each.
    """
    g = timeline.graph
    tids = _thread_ids(timeline)
    dumps = json.dumps
    encoded: dict[object, str] = {}

    def enc(value) -> str:
        hit = encoded.get(value)
        if hit is None:
            hit = encoded[value] = dumps(value)
        return hit

    meta_json: dict[int, tuple[object, str]] = {}

    def enc_meta(part) -> str:
        hit = meta_json.get(id(part))
        if hit is None or hit[0] is not part:
            body = dumps(dict(part), sort_keys=True, separators=(",", ":"))[1:-1]
            hit = meta_json[id(part)] = (part, body)
        return hit[1]

    rows: list[tuple[int, int, float, int, str]] = []
    for t, res in enumerate(g.resources):
        start_ms = timeline.start_ms[t]
        dur_ms = timeline.end_ms[t] - start_ms
        work = g.work_ms[t]
        args = f'"task":{t},"work_ms":{round(work, 9)!r}'
        if work > 0.0 and dur_ms > 0.0:
            args += f',"slowdown":{round(dur_ms / work, 6)!r}'
        meta = g.meta[t]
        if meta:
            for part in (meta if isinstance(meta, tuple) else (meta,)):
                if part:
                    args += "," + enc_meta(part)
        ts, dur = _us(start_ms), _us(dur_ms)
        head = f'{{"args":{{{args}}},"cat":{enc(g.kinds[t])},"dur":{dur!r},"name":{enc(g.names[t])},"ph":"X",'
        for r in res:
            pid = g.resource_owner[r]
            rows.append((pid, tids[r], ts, t, f'{head}"pid":{pid},"tid":{tids[r]},"ts":{ts!r}}}'))
    rows.sort(key=lambda row: row[:4])
    parts = [dumps(e, sort_keys=True, separators=(",", ":")) for e in _metadata_events(timeline, tids)]
    parts.extend(row[4] for row in rows)
    tail = ',"displayTimeUnit":"ms"'
    if metadata:
        tail += ',"otherData":' + dumps(dict(metadata), sort_keys=True, separators=(",", ":"))
    return '{"traceEvents":[' + ",".join(parts) + "]" + tail + "}"


def chrome_trace(timeline: Timeline, *, metadata: Mapping[str, object] | None = None) -> dict:
    """The trace as a dict (``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``)."""
    return json.loads(trace_json(timeline, metadata=metadata))


def write_trace(timeline: Timeline, path: str | Path, *, metadata: Mapping[str, object] | None = None) -> Path:
    """Write the trace JSON to ``path`` (open it in ui.perfetto.dev or chrome://tracing)."""
    out = Path(path)
    if out.parent and not out.parent.exists():
        raise ValueError(f"trace path {str(out)!r}: folder {str(out.parent)!r} does not exist; create it first")
    out.write_text(trace_json(timeline, metadata=metadata) + "\n", encoding="utf-8")
    return out
