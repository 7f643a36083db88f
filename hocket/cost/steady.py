"""The steady state: one call's time when the operator runs in a loop with the host ahead.

``predict`` prices a call that starts with the GPU idle: the host issues the first piece,
the device waits for it, and every later piece waits for its place in the host's issue chain
(``hocket.cost.issue``). That is what a benchmark times when every call sits behind its own
barrier. In a training step the host runs ahead of the device: while call ``i`` runs on the
GPU, the host is already issuing call ``i + 1`` (its launches, its collectives, the relay's
handshakes with the peers, which wait on the other host but never on the device). A call
then costs whichever is longer:

* its device work with no issue waits (the same stages, the issue stages taking no time),
  since consecutive calls do not overlap on the device (each starts by waiting for the
  caller's stream);
* the host's time to issue one call (every issue stage, in order, the first items' host time
  included: ``Stage.steady_ms``), since the host cannot run further ahead than one call per that time.

Benchmarks time this state by running several calls back to back per sample
(``hocket.timing.timer``, ``reps > 1``).
"""

from __future__ import annotations

from dataclasses import replace

from hocket.cost.stages import Schedule, Stage, schedule


def steady_state_total(stages: list[Stage]) -> tuple[float, dict[str, float], Schedule]:
    """(per-call ms in the steady state, busy ms per resource, the device-only schedule) of one
    call's ``stages``."""
    device_only = [replace(s, duration_ms=0.0) if s.is_issue else s for s in stages]
    timeline = schedule(device_only)
    host_ms = host_issue_ms(stages)
    busy = dict(timeline.busy_ms)
    if host_ms > 0.0:
        busy["issue"] = host_ms
    return max(timeline.total_ms, host_ms), busy, timeline


def host_issue_ms(stages: list[Stage]) -> float:
    """The host's time to issue one call in a loop: every issue stage, the first items' included."""
    return sum(s.duration_ms if s.steady_ms is None else s.steady_ms for s in stages if s.is_issue)
