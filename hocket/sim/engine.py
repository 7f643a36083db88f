"""Discrete-event engine: tasks on exclusive resources, with dependencies and contention.

Model (one paragraph, so the cost model and the tests can reason about it):

* A *resource* belongs to an *owner* (a rank, or a class of identical ranks) and has a
  kind (``compute``, ``link``, ``copy_engine``, ``host``, ...). It runs one task at a
  time, in the order the tasks were added that use it (an in-order stream, like a CUDA
  stream or a NCCL communicator: a task never overtakes an earlier task on its resource).
* A *task* needs one or more resources at once (a collective spanning several owners
  uses one link resource of each participant, so the slowest participant gates it),
  ``work_ms`` of time when it runs alone, and the tasks it depends on (added earlier).
  It starts as soon as its dependencies have finished and it is at the head of every
  resource it uses. Because dependencies point to earlier tasks and resources serve
  tasks in insertion order, the lowest unfinished task can always start: no deadlock.
* *Contention*: a task has a contention ``kind`` (``compute``, or a transfer's transport
  kind) and a map ``slowdown_by`` from other kinds to factors >= 1. While tasks of kind
  ``k`` run on any owner the task also runs on, the task progresses at
  ``1 / prod(slowdown_by[k])`` of its solo speed (each distinct kind counts once).
  Rates are piecewise constant between events, so the finish times are exact.

Without contention the schedule equals the classic list schedule
``start = max(end of deps, end of previous task on each resource)``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

NO_SLOWDOWN: Mapping[str, float] = {}


class TaskGraph:
    """A builder for the engine's input: resources and tasks, stored column-wise.

    Column storage keeps a whole training step (hundreds of thousands of tasks) cheap.
    Task ids are the insertion indices; dependencies must point to earlier tasks, so the
    graph is acyclic by construction.
    """

    def __init__(self) -> None:
        self.resource_names: list[str] = []
        self.resource_owner: list[int] = []
        self.resource_kind: list[str] = []
        self.owner_names: list[str] = []
        self._resource_index: dict[tuple[str, str], int] = {}
        self._owner_index: dict[str, int] = {}
        # task columns
        self.names: list[str] = []
        self.resources: list[tuple[int, ...]] = []
        self.work_ms: list[float] = []
        self.deps: list[tuple[int, ...]] = []
        self.kinds: list[str] = []
        self.slowdown_by: list[Mapping[str, float]] = []
        self.meta: list[Mapping[str, object] | None] = []
        self._tail: dict[int, int] = {}
        self._slow_checked: dict[int, tuple[Mapping[str, float], Mapping[str, float]]] = {}

    # -- resources ------------------------------------------------------------
    def owner(self, name: str) -> int:
        """The id of owner ``name`` (created on first use)."""
        idx = self._owner_index.get(name)
        if idx is None:
            if not isinstance(name, str) or not name:
                raise ValueError(f"owner name={name!r} must be a non-empty string (a rank or rank-class label)")
            idx = len(self.owner_names)
            self._owner_index[name] = idx
            self.owner_names.append(name)
        return idx

    def resource(self, owner: str, kind: str) -> int:
        """The id of resource ``kind`` of ``owner`` (created on first use)."""
        key = (owner, kind)
        idx = self._resource_index.get(key)
        if idx is None:
            if not isinstance(kind, str) or not kind:
                raise ValueError(f"resource kind={kind!r} must be a non-empty string such as 'compute' or 'link'")
            owner_id = self.owner(owner)
            idx = len(self.resource_names)
            self._resource_index[key] = idx
            self.resource_names.append(f"{owner}/{kind}")
            self.resource_owner.append(owner_id)
            self.resource_kind.append(kind)
        return idx

    # -- tasks ------------------------------------------------------------------
    def add(
        self,
        *,
        name: str,
        resources: Sequence[int],
        work_ms: float,
        deps: Sequence[int] = (),
        kind: str = "compute",
        slowdown_by: Mapping[str, float] | None = None,
        meta: Mapping[str, object] | None = None,
    ) -> int:
        """Add a task and return its id. See the module docstring for the semantics.

        ``slowdown_by`` and ``meta`` are kept by reference (pass shared, unchanging
        mappings for repeated tasks; a tuple of mappings for ``meta`` is merged in order by
        the trace export).
        """
        tid = len(self.names)
        res = resources if type(resources) is tuple else tuple(resources)
        if not res:
            raise ValueError(f"task {name!r}: resources is empty; a task needs at least one resource id")
        n_res = len(self.resource_names)
        for r in res:
            if type(r) is not int or not 0 <= r < n_res:
                raise ValueError(f"task {name!r}: resource id {r!r} is unknown; create it with TaskGraph.resource()")
        if len(res) > 1 and len(set(res)) != len(res):
            raise ValueError(f"task {name!r}: resources={res} lists a resource twice; list each once")
        work = float(work_ms)
        if not 0.0 <= work < math.inf:  # NaN fails too
            raise ValueError(f"task {name!r}: work_ms={work_ms!r} must be finite and >= 0")
        dep_t = deps if type(deps) is tuple else tuple(deps)
        for d in dep_t:
            if type(d) is not int or not 0 <= d < tid:
                raise ValueError(
                    f"task {name!r}: dependency {d!r} must be the id of an earlier task (0..{tid - 1}); "
                    "add tasks in dependency order"
                )
        slow = self._checked_slowdown(name, slowdown_by) if slowdown_by else NO_SLOWDOWN
        self.names.append(name)
        self.resources.append(res)
        self.work_ms.append(work)
        self.deps.append(dep_t)
        self.kinds.append(kind)
        self.slowdown_by.append(slow)
        self.meta.append(meta)
        tail = self._tail
        for r in res:
            tail[r] = tid
        return tid

    def _checked_slowdown(self, name: str, table: Mapping[str, float]) -> Mapping[str, float]:
        """Validate a factor table once per table object (tables are shared by repeated tasks)."""
        hit = self._slow_checked.get(id(table))
        if hit is not None and hit[0] is table:
            return hit[1]
        for other, factor in table.items():
            f = float(factor)
            if not 1.0 <= f < math.inf:
                raise ValueError(
                    f"task {name!r}: slowdown_by[{other!r}]={factor!r} must be a finite factor >= 1 (1 = no slowdown)"
                )
        checked = dict(table)
        self._slow_checked[id(table)] = (table, checked)  # holding ``table`` keeps its id unique
        return checked

    def __len__(self) -> int:
        return len(self.names)

    def tail(self, resource: int) -> int | None:
        """The last task added to ``resource`` (it ends last: resources run in order), or None."""
        return self._tail.get(resource)

    def owners_of(self, task: int) -> tuple[int, ...]:
        seen: list[int] = []
        for r in self.resources[task]:
            o = self.resource_owner[r]
            if o not in seen:
                seen.append(o)
        return tuple(seen)


@dataclass(frozen=True, kw_only=True)
class Timeline:
    """What the engine produced: start and end of every task of ``graph``."""

    graph: TaskGraph
    start_ms: tuple[float, ...]
    end_ms: tuple[float, ...]
    events: int = field(default=0)

    @property
    def makespan_ms(self) -> float:
        return max(self.end_ms, default=0.0)

    def busy_ms(self) -> dict[str, float]:
        """Time each resource spent running tasks, by resource name."""
        busy = [0.0] * len(self.graph.resource_names)
        for t, res in enumerate(self.graph.resources):
            span = self.end_ms[t] - self.start_ms[t]
            for r in res:
                busy[r] += span
        return dict(zip(self.graph.resource_names, busy))


def simulate(graph: TaskGraph) -> Timeline:
    """Run ``graph`` to completion and return every task's start and end (ms)."""
    n = len(graph)
    n_res = len(graph.resource_names)
    res_owner = graph.resource_owner
    resources = graph.resources
    work = graph.work_ms
    kinds = graph.kinds
    slow = graph.slowdown_by

    queues: list[list[int]] = [[] for _ in range(n_res)]
    for t, res in enumerate(resources):
        for r in res:
            queues[r].append(t)
    head = [0] * n_res
    busy = [-1] * n_res
    pending = [len(d) for d in graph.deps]
    succs: list[list[int]] = [[] for _ in range(n)]
    for t, deps in enumerate(graph.deps):
        for d in deps:
            succs[d].append(t)
    owners = [(res_owner[res[0]],) if len(res) == 1 else graph.owners_of(t) for t, res in enumerate(resources)]

    start = [math.nan] * n
    end = [math.nan] * n
    # running-task state: remaining solo work at t0, t0, rate, version
    remaining = [0.0] * n
    t0 = [0.0] * n
    rate = [1.0] * n
    version = [0] * n
    active_on_owner: list[dict[int, None]] = [{} for _ in graph.owner_names]
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    now = 0.0
    done = 0
    events = 0

    def slowdown_of(t: int) -> float:
        table = slow[t]
        if not table:
            return 1.0
        kinds_seen: set[str] = set()
        for o in owners[t]:
            for other in active_on_owner[o]:
                if other != t:
                    kinds_seen.add(kinds[other])
        factor = 1.0
        for k in kinds_seen:
            factor *= table.get(k, 1.0)
        return factor

    def push(t: int) -> None:
        nonlocal seq
        finish = t0[t] + remaining[t] / rate[t]
        version[t] += 1
        seq += 1
        heapq.heappush(heap, (finish, seq, t, version[t]))

    def refresh_neighbours(t: int) -> None:
        own = owners[t]
        if len(own) == 1:
            touched = [other for other in active_on_owner[own[0]] if other != t]
        else:
            touched = list(dict.fromkeys(other for o in own for other in active_on_owner[o] if other != t))
        for other in touched:
            if not slow[other]:
                continue
            new_rate = 1.0 / slowdown_of(other)
            if new_rate != rate[other]:
                remaining[other] = max(0.0, remaining[other] - (now - t0[other]) * rate[other])
                t0[other] = now
                rate[other] = new_rate
                push(other)

    def try_start(t: int) -> None:
        if pending[t] or start[t] == start[t]:  # deps open, or already started (not NaN)
            return
        for r in resources[t]:
            if busy[r] != -1 or queues[r][head[r]] != t:
                return
        for r in resources[t]:
            busy[r] = t
        start[t] = now
        for o in owners[t]:
            active_on_owner[o][t] = None
        remaining[t] = work[t]
        t0[t] = now
        rate[t] = 1.0 / slowdown_of(t)
        push(t)
        refresh_neighbours(t)

    for r in range(n_res):
        if queues[r]:
            try_start(queues[r][0])

    while heap:
        finish, _, t, ver = heapq.heappop(heap)
        if ver != version[t]:
            continue
        events += 1
        now = finish
        end[t] = now
        done += 1
        for o in owners[t]:
            del active_on_owner[o][t]
        candidates: list[int] = []
        for r in resources[t]:
            busy[r] = -1
            head[r] += 1
            if head[r] < len(queues[r]):
                candidates.append(queues[r][head[r]])
        for s in succs[t]:
            pending[s] -= 1
            if pending[s] == 0:
                candidates.append(s)
        refresh_neighbours(t)
        for c in sorted(set(candidates)):
            try_start(c)

    if done != n:  # cannot happen: the lowest unfinished id is always at the head of its resources
        raise RuntimeError(f"hocket.sim engine invariant broken: {n - done} of {n} tasks never ran")
    return Timeline(graph=graph, start_ms=tuple(start), end_ms=tuple(end), events=events)
