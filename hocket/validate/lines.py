"""Results lines as the validation reads them: which files, which lines measured today's executors, and how
each line ran.

How a line ran (the executor it measured: the relay's signalling and calls, the copy-engine peer protocol, the
own-block zeroing and summing of a reduce-scatter; and the timing mode: steady state, replayed from a CUDA graph,
under ``HOCKET_EAGER_GRAPHS``) is read from the line's ``executor`` version and ``run`` fields. Only lines written
before the ``executor`` field existed are placed by the folder they are stored in (``CURRENT_RELAY_RUNS`` and its
neighbours). The cost-model validation (:mod:`hocket.validate.cost_model`) and the planner regret
(:mod:`hocket.validate.regret`) price each line with the peer protocol it ran (:func:`plan_as_ran`) and tell
lines of different executors apart with the rest.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable
from pathlib import Path

from hocket.bench.record import executor_revision, read_records
from hocket.core.peer_protocol import AUTO_ORDER as PEER_PROTOCOLS

RESULTS = Path("benchmarks") / "results"
"""The committed results folder, relative to a checkout's root: what the commands read when given no paths."""


def results_paths(paths: Iterable[Path | str] = ()) -> list[Path]:
    """The results files of ``paths`` in order: a file as given, a folder as every ``*.jsonl`` under it (sorted);
    no paths: every ``*.jsonl`` under :data:`RESULTS` of the current folder. A path that does not exist raises."""
    given = [Path(p) for p in paths] or [RESULTS]
    found: list[Path] = []
    for path in given:
        if path.is_dir():
            found.extend(sorted(path.rglob("*.jsonl")))
        elif path.is_file():
            found.append(path)
        else:
            raise FileNotFoundError(f"{path}: no such results file or folder (run from a checkout's root, or pass "
                                    f"results files or folders)")
    return found

CURRENT_RELAY = "@8MB,thread=0"
"""The host-staged relay the executors run now (messages of at most 8 MB, ``TransportSizes.piece_bytes``, issued on the
calling thread; with ``order="local_first"`` the hiding GEMM is launched before the relay, commit
789842c). Benchmarks tag relay variants in ``run.method`` ("... @<MB>MB,thread=<0|1>"); untagged
lines measured the default relay of the commit they ran."""
FIRST_CURRENT_RELAY_RUN = 5
CURRENT_RELAY_RUNS = tuple(f"h200x2/run{i}/" for i in range(FIRST_CURRENT_RELAY_RUN, 100))
"""Results folders whose multi-rank host_staged lines measured the current executor: those numbered from
``FIRST_CURRENT_RELAY_RUN`` on (the earlier ones measured relays and a local_first order that no executor runs, and the
lines' git hash cannot tell them apart: the device copies carried a stale ``.git``; lines made
since carry ``HOCKET_GIT_HASH``). A change of the relay or of its local_first order must move
``FIRST_CURRENT_RELAY_RUN`` to the first folder made with it."""


def line_executor_revision(record) -> int | None:
    """The executor revision a line names (``hocket.bench.record.EXECUTOR_REVISION``), None for a line written
    before lines carried one (those are placed by their folder)."""
    return executor_revision(getattr(record, "executor", None))


PREVIOUS_VARIANT = "previous"
FIRST_PREVIOUS_NOT_OPERATOR_RUN = 17
PREVIOUS_NOT_OPERATOR_RUNS = tuple(f"/h200/run{i}_" for i in range(FIRST_PREVIOUS_NOT_OPERATOR_RUN, 100))
"""1xH200 results folders whose offload ``tile_fused`` lines of ``run.variant == "previous"`` timed a schedule
the operators no longer run: from ``FIRST_PREVIOUS_NOT_OPERATOR_RUN`` on, ``operator`` is the operators' schedule
(to-host copies held by a driver stream wait where the driver has one), and ``previous`` ran 0.74-0.79 efficient
where ``operator`` ran 0.88-0.93 on to_host 8192x8192x7168 (benchmarks/results/h200/2026-11-30_offload-defaults.md)."""


def superseded_offload_variant(record, path: Path | str) -> bool:
    """A one-rank ``tile_fused`` line of the ``previous`` variant from a run where that was no longer the
    operators' schedule (``PREVIOUS_NOT_OPERATOR_RUNS``); ``path`` is the results file it came from."""
    run = record.run if isinstance(record.run, dict) else {}
    if record.plan.strategy != "tile_fused" or record.site.world != 1 or run.get("variant") != PREVIOUS_VARIANT:
        return False
    if line_executor_revision(record) is not None:
        return True  # every executor revision postdates the folders where `previous` was the operators' schedule
    where = Path(path).resolve().as_posix()
    return any(folder in where for folder in PREVIOUS_NOT_OPERATOR_RUNS)


def steady_line(record) -> bool:
    """A results line timed in the steady state (``hocket.timing.timer`` with ``reps > 1``)."""
    run = record.run if isinstance(record.run, dict) else {}
    reps = run.get("reps", 1)
    return isinstance(reps, int) and reps > 1


def captured_line(record) -> bool:
    """A results line of calls replayed from a CUDA graph (``run.captured``: benchmarks/bench_captured.py,
    bench_multigpu.py --graph, ``hocket bench --graph``): priced with ``predict(..., captured=True)``.

    ``hocket bench --graph`` lines written before ``run.captured`` existed (2xH200 runs
    44, 49 and 51) say so in their command alone, which is read here."""
    run = record.run if isinstance(record.run, dict) else {}
    if "captured" in run:
        return run["captured"] is True
    return hocket_bench_graph_command(getattr(record, "command", ""))


def hocket_bench_graph_command(command: str) -> bool:
    """``command`` runs ``hocket bench ... --graph`` (every plan timed replayed from a CUDA graph)."""
    try:
        words = shlex.split(command or "")
    except ValueError:
        return False
    return len(words) >= 2 and Path(words[0]).name == "hocket" and words[1] == "bench" and "--graph" in words[2:]


EAGER_GRAPHS_BENCH = "bench_eager_graphs"
"""Results files of benchmarks/bench_eager_graphs.py: their lines count only where they say they recorded the
executor fields (``run.executor_fields``). The first eager-graph folders' lines
(benchmarks/results/h200x2/2026-12-01_eager-graphs.md; sequential, the eager planner's choice) do not record the executor fields the validation prices
relay and copy-engine lines by (``run.host_stage_calls``, ``run.own_block_zero``, ``run.own_block_sum``: see
``line_calls`` and its neighbours), which would make
them read as the executors of older runs."""


def eager_graph_line(record) -> bool:
    """A results line of eager calls under ``HOCKET_EAGER_GRAPHS`` (``run.eager_graphs``,
    benchmarks/bench_eager_graphs.py): left out of this validation."""
    run = record.run if isinstance(record.run, dict) else {}
    return run.get("eager_graphs") not in (None, "off")


PEER_PROTOCOL_KINDS = ("ag_mm", "mm_rs", "mm_ar")
PROTOCOL_BEFORE_RUN14 = "push"
"""What every ``chunked``/``copy_engine`` line without ``run.peer_protocol`` ran: the flag-raising push
pipe was the only peer protocol until commit 5945583 (the first 2xH200 folders, bench_h200x2.jsonl)."""


def line_protocol(record) -> str | None:
    """The copy-engine peer protocol a results line ran (``hocket.core.peer_protocol``):
    ``run.peer_protocol`` where the benchmark wrote one, ``"push"`` for a ``chunked`` plan over
    ``copy_engine`` without it (``PROTOCOL_BEFORE_RUN14``), None for every other line."""
    run = record.run if isinstance(record.run, dict) else {}
    named = run.get("peer_protocol")
    if named is not None:
        if named not in PEER_PROTOCOLS:
            raise ValueError(f"run.peer_protocol={named!r} of a {record.site.kind} {record.plan.describe()} line "
                             f"is not a protocol; a line names what ran: one of {PEER_PROTOCOLS}")
        return named
    plan = record.plan
    if plan.strategy == "chunked" and plan.transport == "copy_engine" and record.site.kind in PEER_PROTOCOL_KINDS:
        return PROTOCOL_BEFORE_RUN14
    return None


def plan_as_ran(record, plan=None):
    """``plan`` (default: the line's own) with the copy-engine peer protocol the line ran as its ``protocol``
    field (``Plan.protocol``, which the cost model prices), where the line ran one; unchanged otherwise."""
    plan = record.plan if plan is None else plan
    protocol = line_protocol(record)
    if protocol is None or plan.strategy != "chunked" or plan.transport != "copy_engine":
        return plan
    return plan.with_(protocol=protocol)


def with_plan_protocol(plan, protocol: str | None):
    """``plan`` priced with the copy-engine peer ``protocol`` (None, or a plan that runs no peer protocol:
    unchanged)."""
    if protocol is None or plan.strategy != "chunked" or plan.transport != "copy_engine":
        return plan
    return plan.with_(protocol=protocol)


FIRST_DEVICE_SIGNAL_RUN = 21
DEVICE_SIGNAL_RUNS = tuple(f"h200x2/run{i}/" for i in range(FIRST_DEVICE_SIGNAL_RUN, 100))
"""Results folders whose multi-rank host_staged lines ran the relay with device signals
(its copy streams write and wait for the slot flags themselves: the default since commit a05015f, the
only signalling since); earlier lines ran the host handshake. Lines written since record ``run.host_stage_signal``; ``read_current`` fills it in for
older lines from their folder (and from a ``,signal=`` tag in ``run.method``)."""


def is_relay_line(record) -> bool:
    return record.plan.transport == "host_staged" and record.site.world > 1


def line_signal(record) -> str | None:
    """The relay signalling a multi-rank host_staged line ran (``run.host_stage_signal``; ``"host"`` for a
    line no reader filled in), None for every other line."""
    if not is_relay_line(record):
        return None
    run = record.run if isinstance(record.run, dict) else {}
    return run.get("host_stage_signal") or ("device" if line_executor_revision(record) is not None else "host")


def line_calls(record) -> str | None:
    """How a multi-rank host_staged line's own-data-first pipeline called the relay
    (``run.host_stage_calls``; ``"piece"``, one call per piece, for lines written before the field
    existed), None for every other line (the flag changes only those pipelines)."""
    if not is_relay_line(record) or record.plan.strategy != "chunked" or record.plan.order != "local_first":
        return None
    run = record.run if isinstance(record.run, dict) else {}
    return run.get("host_stage_calls") or ("one" if line_executor_revision(record) is not None else "piece")


def line_own_zero(record) -> str | None:
    """How an own-block-last mm_rs line over a collective transport kept its staging's own block at
    zero (``run.own_block_zero``; ``"each"``, a fill kernel per piece, for lines written before the field:
    runs up to 59; the executors zero it once, when the buffers are made), None for every other line."""
    plan = record.plan
    if record.site.kind != "mm_rs" or plan.strategy != "chunked" or plan.order != "local_first" \
            or plan.transport == "copy_engine" or record.site.world < 2:
        return None
    run = record.run if isinstance(record.run, dict) else {}
    return run.get("own_block_zero") or ("once" if line_executor_revision(record) is not None else "each")


def line_own_sum(record) -> str | None:
    """How a one-piece copy-engine mm_rs line of the ``pull`` protocol added its peers' partials to its own
    block (``run.own_block_sum``; ``"pass"``, one pass after the whole own block's GEMM, for lines written
    before the field; the executors sum in the GEMM's epilogue), None for every other line."""
    if record.site.kind != "mm_rs" or record.site.world < 2 or line_protocol(record) != "pull":
        return None
    run = record.run if isinstance(record.run, dict) else {}
    return run.get("own_block_sum") or ("epilogue" if line_executor_revision(record) is not None else "pass")


def line_label(record) -> str:
    """The plan of a line as the tables print it: ``Plan.describe()``, plus `` ~pull``/`` ~put`` for a
    copy-engine line of another protocol than push (unmarked copy-engine lines ran push), and `` [graph]``
    for a CUDA graph replay (``captured_line``)."""
    protocol = line_protocol(record)
    suffix = f" ~{protocol}" if protocol not in (None, PROTOCOL_BEFORE_RUN14) else ""
    return record.plan.describe() + suffix + (" [graph]" if captured_line(record) else "")


def measures_current_executor(record, path: Path | str) -> bool:
    """False for multi-rank host_staged lines of another relay or executor than today's (the line's ``executor``
    revision; for lines without one, ``CURRENT_RELAY`` and ``CURRENT_RELAY_RUNS``) and for one-rank tile_fused lines of a schedule the
    offload operators no longer run (:func:`superseded_offload_variant`); ``path`` is the results file
    it came from."""
    if superseded_offload_variant(record, path):
        return False
    if not (record.plan.transport == "host_staged" and record.site.world > 1):
        return True
    method = str(record.run.get("method", "")) if isinstance(record.run, dict) else ""
    if "@" in method and not method.split(",signal=")[0].endswith(CURRENT_RELAY):
        return False
    if line_executor_revision(record) is not None:
        return True  # every executor revision runs today's relay
    where = Path(path).resolve().as_posix()
    return any(run in where for run in CURRENT_RELAY_RUNS)


def _fill_signal(record, path: Path | str) -> None:
    """Record which relay signalling an older multi-rank host_staged line ran (``DEVICE_SIGNAL_RUNS``)."""
    run = record.run if isinstance(record.run, dict) else None
    if run is None or not is_relay_line(record) or run.get("host_stage_signal"):
        return
    method = str(run.get("method", ""))
    if ",signal=" in method:
        run["host_stage_signal"] = method.rsplit(",signal=", 1)[1].split(",")[0].strip()
        return
    if line_executor_revision(record) is not None:
        run["host_stage_signal"] = "device"
        return
    where = Path(path).resolve().as_posix()
    run["host_stage_signal"] = "device" if any(r in where for r in DEVICE_SIGNAL_RUNS) else "host"


def read_current(paths, *, all_relays: bool = False, strict: bool = False,
                 sources: dict | None = None) -> tuple[list, list[str]]:
    """Results lines of ``paths`` that measured today's executors (all of them with
    ``all_relays``), and notes on what was skipped. A file that is not results lines is
    noted and skipped, or raises with ``strict``. ``sources``: filled with id(line) -> its file."""
    records, notes, superseded = [], [], 0
    for path in paths:
        try:
            lines = read_records(path)
        except ValueError as exc:  # another benchmark's file (e.g. simulate or compile timings)
            if strict:
                raise
            notes.append(f"{path} skipped: {str(exc)[:160]}")
            continue
        if Path(path).name.startswith(EAGER_GRAPHS_BENCH):
            unrecorded = [r for r in lines if not (isinstance(r.run, dict) and r.run.get("executor_fields"))]
            if unrecorded:
                notes.append(f"{path}: {len(unrecorded)} bench_eager_graphs.py lines without the executor fields "
                             f"skipped")
                lines = [r for r in lines if r not in unrecorded]
        graphed = [r for r in lines if eager_graph_line(r)]
        if graphed:
            notes.append(f"{path}: {len(graphed)} lines of calls under HOCKET_EAGER_GRAPHS skipped (priced by "
                         f"hocket.plan.eager_graphs)")
            lines = [r for r in lines if not eager_graph_line(r)]
        kept = lines if all_relays else [r for r in lines if measures_current_executor(r, path)]
        for r in kept:
            _fill_signal(r, path)
            if sources is not None:
                sources[id(r)] = path
        superseded += len(lines) - len(kept)
        records.extend(kept)
    if superseded:
        notes.append(f"{superseded} host_staged lines of earlier relays/executors skipped (multi-rank relays, and 1xH200 "
                     f"tile_fused lines of the 'previous' schedule; keep them with --all-relays)")
    return records, notes




LEASE_PROFILES = (("host_staged", "profile_host.json"), ("bench_captured", "profile_host.json"), ("", "profile.json"))
"""Which profile beside a results file was calibrated in the same lease for it: a file whose name holds
``host_staged`` (the slow-link phase of ``benchmarks/run_multigpu.sh``, NCCL with ``NCCL_P2P_DISABLE=1``)
or ``bench_captured`` (benchmarks/bench_captured.py, the same link mode)
reads ``profile_host.json`` (``PHASES=calibrate_host``); any other reads ``profile.json``
(``PHASES=calibrate``). The first entry whose name part the file's name holds decides."""


def lease_profile_path(results: Path | str) -> Path | None:
    """The calibration profile measured on the same lease as the results file ``results`` (its folder,
    ``LEASE_PROFILES``), or None when that lease left none: what ``hocket plan`` would have priced with
    had it run there after ``hocket calibrate``."""
    results = Path(results)
    for part, name in LEASE_PROFILES:
        if part in results.name:
            candidate = results.parent / name
            return candidate if candidate.is_file() else None
    return None


