"""Multi-GPU overlap benchmark: all-gather + matmul and matmul + reduce-scatter across GPUs.

Run under torchrun, one process per GPU (any count), in one of two link modes:

    torchrun --nproc_per_node 2 benchmarks/bench_multigpu.py --link nvlink --cases issue6
    NCCL_P2P_DISABLE=1 torchrun --nproc_per_node 2 benchmarks/bench_multigpu.py --link host_staged

``nvlink``: hocket may use every transport of the cluster (``h200x2`` / ``h200x8`` presets);
``host_staged``: the cluster offers hocket only pinned-host staging (preset ``h200-host-staged``,
as between GPUs of two vendors) and the NCCL baselines go through host memory because of
``NCCL_P2P_DISABLE=1`` (a separate launch). PyTorch's fused ops keep using NVLink under that
variable, so they are measured in ``nvlink`` mode only.

Per case (``--cases issue6|llama70b|llama405b|gpt3``, comma-separated), after checking every
method's output against the sequential reference (NCCL + torch.mm): compute alone (torch.mm on
the whole per-rank problem), communication alone (NCCL and hocket's own transport of the mode,
the faster counts), sequential, PyTorch's ``torch.ops.symm_mem`` fused ops (default and with
``TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP=1``), hocket's chunked / ring / tile_fused plans, and the
planner's choice (autotuned on the live group: the top predicted plans and sequential are
measured, sequential wins unless beaten). Times are CUDA events, each iteration behind a barrier
and the max over ranks (``--reps`` calls back to back per sample, their mean: the steady
state), medians of ``--iters`` (>= 50) with p10/p90. The cost model's
prediction stands beside every hocket plan. ``--calibrate`` first measures a GEMM beside each
transfer of the mode (and each transfer beside the GEMM) and hands the factors to the planner.

``--graph``: every method is checked and timed replayed from a CUDA graph (``hocket.ops.CapturedCall``:
one replay per call, no host issue cost but the replay's), as a training step captured whole runs it.
Plans a graph cannot capture (``hocket.plan.capture``: copy-engine push and tile-fused plans and
peer reads, whose waits report through buffers the host checks) are left out; a capture that fails is recorded as that method's failure. The
planner's choice is then the captured planner's (``hocket.ops.live.captured_planner``), its shortlist
timed as replays (``operator_runners(captured=True)``). PyTorch's fused ops are captured too, after the
planner. The lines carry ``run.captured`` (hocket validate and hocket regret price them as replays).

Results: JSON lines (``hocket.bench.record`` schema) in ``--out``, a summary JSON beside it, and
a table printed last by rank 0.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import hocket.ops as H
from hocket.bench.efficiency import overlap_score
from hocket.bench.provenance import collect, command_line
from hocket.bench.record import Baselines, make_record, write_records
from hocket.bench.tp_cases import CASE_SETS, case_sites
from hocket.core.peer_protocol import available, peer_protocol_for, plan_protocol
from hocket.core.plan import CAPTURABLE_TRANSPORTS, PROTOCOLS, Plan
from hocket.core.site import Site
from hocket.core.sizes import MIB, TransportSizes, sizes_in_force, using_sizes
from hocket.env import eager_graphs
from hocket.hardware import load_cluster
from hocket.hardware.fingerprint import fingerprint
from hocket.hardware.profile import CalibrationProfile, ContentionPoint, load_profile
from hocket.launch import init_torchrun
from hocket.ops.captured import replayed as replayed_call
from hocket.ops.live import LiveConfig, LivePlanner, captured_planner, operator_runners, set_process_planner
from hocket.ops.lowering.peer_pipe import close_peer_pipes
from hocket.plan.autotune import AutotuneConfig
from hocket.plan.bucket import fit_plan
from hocket.plan.capture import capturable
from hocket.strategies import predict
from hocket.timing.stats import Summary, summarize
from hocket.timing.timer import sample_ms
from hocket.transport.copy_engine import close_mailboxes
from hocket.transport.group import resolve_group
from hocket.transport.host_relay import close_relays
from hocket.transport.registry import get_transport
from hocket.transport.sm_budget import close_sm_budgets, create_sm_budgets

NVLINK_PROFILE = Path(__file__).parent / "results" / "calibration" / "h200x2-nccl-full.json"
NATIVE_ENV = "TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP"
CHECKED_ERRORS = (RuntimeError, ValueError, AssertionError)
PEER_KINDS = ("ag_mm", "mm_rs", "mm_ar")
"""what a method may raise on a GPU (CUDA, Triton, shape and tolerance errors): recorded, not fatal."""


def hocket_plans(link: str, smoke: bool, budgets: tuple[int, ...] = ()) -> list[Plan]:
    """The hocket plans measured in each link mode (the planner searches its own space); ``budgets``:
    the NCCL SM caps made up front (``--sm-budgets``), each tried on a local-first chunked plan."""
    if link == "nvlink":
        plans = [Plan(strategy="chunked", chunks=2), Plan(strategy="ring", chunks=1, transport="p2p")]
        plans += [Plan(strategy="chunked", chunks=c, order="local_first") for c in (1, 2, 4)]
        plans += [Plan(strategy="chunked", chunks=1, transport="copy_engine"),
                  Plan(strategy="tile_fused", chunks=1, transport="copy_engine")]
        plans += [Plan(strategy="chunked", chunks=2, order="local_first", comm_sms=sms) for sms in budgets]
    else:
        plans = [Plan(strategy="chunked", chunks=4), Plan(strategy="chunked", chunks=4, transport="host_staged")]
        plans += [Plan(strategy="chunked", chunks=c, transport="host_staged", order="local_first")
                  for c in (1, 2, 4, 8, 16)]
    if smoke:
        plans = [p for p in plans if p.chunks in (1, 2, 4)][:6] + [p for p in plans if p.strategy == "tile_fused"][:1]
    return list(dict.fromkeys(plans))


def runnable(plan: Plan, kind: str) -> bool:
    """Whether this build runs ``plan`` here (GPU-only strategies and transports register on GPUs)."""
    from hocket.ops.planning import supported
    from hocket.transport.registry import available_transports

    return plan.strategy in supported(kind) and plan.transport in available_transports()


# -- operands and methods ---------------------------------------------------------------
class Case:
    """One site's operands on this rank, its reference output, and its callables."""

    def __init__(self, site: Site, *, group, device: torch.device, seed: int) -> None:
        self.site, self.group, self.device = site, group, device
        self.handle = resolve_group(group)
        w, rank = site.world, self.handle.rank
        gen = torch.Generator(device=device).manual_seed(seed * 1009 + rank)
        dtype = getattr(torch, site.dtype)

        def rand(*shape):
            return torch.randn(*shape, generator=gen, device=device, dtype=torch.float32).to(dtype)

        rows = site.m // w if site.kind == "ag_mm" else site.m
        self.A = rand(rows, site.k)
        self.B = rand(site.k, site.n)
        self.A_full = rand(site.m, site.k)
        self.C_full = torch.empty(site.m, site.n, dtype=dtype, device=device)
        self.comm_in = self.A if site.kind == "ag_mm" else rand(site.m, site.n)
        comm_rows = site.m if site.kind == "ag_mm" else site.m // w
        self.comm_out = torch.empty(comm_rows, self.comm_in.shape[1], dtype=dtype, device=device)
        self.reference = self.run(Plan())

    def run(self, plan: Plan) -> torch.Tensor:
        if self.site.kind == "ag_mm":
            return H.all_gather_matmul(self.A, [self.B], 0, self.group, return_A=False, plan=plan)[1][0]
        if self.site.kind == "mm_rs":
            return H.matmul_reduce_scatter(self.A, self.B, "sum", 0, self.group, plan=plan)
        return H.matmul_all_reduce(self.A, self.B, "sum", self.group, plan=plan)

    def own_block_sum(self) -> str:
        """How a one-piece pull mm_rs of this case sums its own block, as the cut the executor makes:
        ``epilogue@<plain rows>`` or ``pass`` (so its line is priced as it ran even if the rule that picks
        the cut changes)."""
        from hocket.ops.lowering.peer_pull import own_block_split
        from hocket.ops.lowering.problems import ScatterMatmul

        plain, fused = own_block_split(ScatterMatmul(self.A, self.B, 0, self.handle.world), self.handle)
        return f"epilogue@{plain}" if fused else "pass"

    def compute_alone(self) -> None:
        torch.mm(self.A_full, self.B, out=self.C_full)

    def comm(self, transport_name: str, *, comm_sms: int | None = None):
        transport = get_transport(transport_name, self.handle, comm_sms=comm_sms)
        if self.site.kind == "ag_mm":
            return lambda: transport.all_gather(self.comm_out, self.comm_in).wait()
        return lambda: transport.reduce_scatter(self.comm_out, self.comm_in).wait()

    def pytorch(self, *, native: bool):
        """PyTorch's fused op (``native``: with TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP set during the call)."""
        name = self.handle.name

        def call():
            if native:
                os.environ[NATIVE_ENV] = "1"
            try:
                if self.site.kind == "ag_mm":
                    return torch.ops.symm_mem.fused_all_gather_matmul(self.A, [self.B], 0, name, return_A=False)[1][0]
                return torch.ops.symm_mem.fused_matmul_reduce_scatter(self.A, self.B, "sum", 0, name)
            finally:
                if native:
                    os.environ.pop(NATIVE_ENV, None)

        return call


def all_ok(ok: bool, device) -> bool:
    """True only if every rank's ``ok`` is True (ranks skip a failed method together)."""
    flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=device)
    dist.all_reduce(flag, op=dist.ReduceOp.MIN)
    return bool(flag.item())


def checked(case: Case, fn, what: str) -> tuple[bool, float | None, str]:
    """Run ``fn`` once and compare its output with the reference (every rank)."""
    error, message = None, ""
    try:
        out = fn()
        if case.device.type == "cuda":
            torch.cuda.synchronize()
        if out is not None:
            H.assert_close(out, case.reference, world=case.site.world, what=what)
            error = H.max_error(out, case.reference)
    except CHECKED_ERRORS as exc:
        message = f"{type(exc).__name__}: {str(exc)[:300]}"
    ok = all_ok(not message, case.device)
    return ok, error, message or ("" if ok else "failed on another rank")


def timed(fn, args, case: Case):
    samples = sample_ms(fn, iters=args.iters, warmup=args.warmup, group=case.group, device=case.device,
                        reps=args.reps)
    return summarize(samples)


# -- contention calibration -----------------------------------------------------------
def calibrate(case: Case, args, profile: CalibrationProfile | None, log) -> tuple[CalibrationProfile | None, dict]:
    """GEMM slowdown beside each transfer of the link mode (whole, and in 8 pieces) and back."""
    from hocket.calibrate.contention import measure_pair
    from hocket.timing.timer import TimingConfig

    transfers = {"sm_collective": "collective",
                 "copy_engine" if args.link == "nvlink" else "host_link": "copy_engine" if args.link == "nvlink"
                 else "host_staged"}
    detail, measured = {}, {}
    timing = TimingConfig(warmup=3, iters=max(10, args.iters // 3))
    for cap in sm_caps(args):  # NCCL beside the GEMM with each SM budget: the GEMM keeps more SMs
        capped = case.comm("collective", comm_sms=cap)
        point = measure_pair(case.compute_alone, capped, timing=timing, group=case.group, device=case.device)
        alone = summarize(sample_ms(capped, iters=timing.iters, warmup=2, group=case.group, device=case.device))
        detail[f"sm_collective_sms{cap}"] = {"transport": "collective", "comm_sms": cap, "whole": vars(point),
                                             "comm_alone_ms": alone.median_ms}
        log(f"  contention NCCL max_ctas={cap:<3d}: GEMM x{point.gemm_slowdown:.2f}, transfer "
            f"x{point.transfer_slowdown:.2f}, alone {alone.median_ms:.3f} ms")
    for kind, transport in transfers.items():
        if not runnable(Plan(strategy="chunked", transport=transport), case.site.kind):
            continue
        whole = case.comm(transport)
        point = measure_pair(case.compute_alone, whole, timing=timing, group=case.group, device=case.device)
        piece_in, piece_out = case.comm_in[: case.comm_in.shape[0] // 8], case.comm_out[: case.comm_out.shape[0] // 8]
        t = get_transport(transport, case.handle)
        if case.site.kind == "ag_mm":
            piece = lambda t=t, i=piece_in, o=piece_out: t.all_gather(o, i).wait()  # noqa: E731
        else:
            piece = lambda t=t, i=piece_in, o=piece_out: t.reduce_scatter(o, i).wait()  # noqa: E731
        chunked = measure_pair(case.compute_alone, piece, timing=timing, group=case.group, device=case.device)
        detail[kind] = {"transport": transport, "whole": vars(point), "eighth": vars(chunked)}
        measured[kind] = point
        log(f"  contention {kind:14s} via {transport:11s}: GEMM x{point.gemm_slowdown:.2f}, transfer "
            f"x{point.transfer_slowdown:.2f} (in eighths: GEMM x{chunked.gemm_slowdown:.2f}, "
            f"transfer x{chunked.transfer_slowdown:.2f})")
    if profile is None:
        return None, detail
    merged = dict(profile.contention)
    merged.update({k: ContentionPoint(gemm_slowdown=max(1.0, p.gemm_slowdown),
                                      transfer_slowdown=max(1.0, p.transfer_slowdown)) for k, p in measured.items()})
    return replace(profile, contention=merged), detail


# -- one case ---------------------------------------------------------------------------
def measure_case(site: Site, args, *, group, device, cluster, profile, planner, provenance, log) -> dict:
    site = shrunk(site, args.shrink)
    case = Case(site, group=group, device=device, seed=args.seed)
    rank0 = dist.get_rank() == 0
    row = {"site": site.to_dict(), "methods": {}, "failures": {}, "captured": args.graph}
    calls = {}  # name -> what was timed (in graph mode a replay), for the paired measurement

    def measure(name: str, fn, *, plan: Plan | None = None, check: bool = True) -> float | None:
        if plan is not None and plan.comm_sms is not None and f"sms={plan.comm_sms}" not in name:
            name += f"/sms={plan.comm_sms}"  # describe() leaves the SM budget out; names must stay distinct
        if args.graph:
            fn, refused = replayed(case, name, fn)
            if fn is None:
                row["failures"][name] = refused
                log(f"    {name:32s} NOT CAPTURED: {refused}")
                return None
        calls[name] = fn
        if check:
            ok, err, message = checked(case, fn, name)
            if not ok:
                row["failures"][name] = message
                log(f"    {name:32s} FAILED: {message}")
                return None
        else:
            err = None
            fn()
        summary = timed(fn, args, case)
        entry = {"median_ms": summary.median_ms, "p10_ms": summary.p10_ms, "p90_ms": summary.p90_ms,
                 "n": summary.n, "max_error": err}
        if plan is not None:
            entry["plan"] = plan.to_dict()
            entry.update(executor_fields(case, plan))
            entry["predicted_ms"] = predicted(site, plan, cluster, profile, steady=args.reps > 1)
        row["methods"][name] = entry
        pred = entry.get("predicted_ms")
        log(f"    {name:32s} {summary.median_ms:7.3f} ms (p10 {summary.p10_ms:.3f}, p90 {summary.p90_ms:.3f})"
            + (f", predicted {pred:.3f}" if pred else "") + (f", max error {err:.2g}" if err is not None else ""))
        return summary.median_ms

    log(f"  {site.kind} m={site.m} k={site.k} n={site.n} ({site.name}) world {site.world}, link {args.link}")
    measure("compute_alone", case.compute_alone, check=False)
    measure("comm_nccl", case.comm("collective"), check=False)
    measure("sequential", lambda: case.run(Plan()), plan=Plan())
    plans = [p for p in hocket_plans(args.link, args.smoke, sm_caps(args)) if runnable(p, site.kind)]
    if args.graph and args.link == "nvlink":  # replayed, the pulls in pieces and the relay beside the GEMM
        plans += [p for p in (Plan(strategy="chunked", chunks=4, transport="copy_engine"),
                              *(Plan(strategy="chunked", chunks=c, transport="host_staged", order="local_first")
                                for c in (1, 2))) if runnable(p, site.kind)]
    if args.graph:
        left_out = [p for p in plans if not capturable(site, p)]
        if left_out:
            log(f"    not capturable, left out: {', '.join(p.describe() for p in left_out)}")
            row["left_out"] = [p.to_dict() for p in left_out]
        plans = [p for p in plans if capturable(site, p)]
    for plan in plans:  # NCCL plans first: the riskier GPU-only paths come after every safe measurement
        if plan.transport in ("collective", "p2p"):
            measure(plan.describe(), lambda plan=plan: case.run(plan), plan=plan)
    torch_ops = args.link == "nvlink" and site.kind in ("ag_mm", "mm_rs") and device.type == "cuda"
    if torch_ops and not args.graph:
        measure_pytorch(measure, case)
    own = "copy_engine" if args.link == "nvlink" else "host_staged"
    for suffix, sizes in host_variants(args):
        with using_sizes(sizes):
            if runnable(Plan(strategy="chunked", transport=own), site.kind) and (not args.graph or own in CAPTURABLE_TRANSPORTS):
                measure(f"comm_{own}{suffix}", case.comm(own), check=False)
            for plan in plans:
                if plan.transport not in ("collective", "p2p"):
                    measure(plan.describe() + suffix, lambda plan=plan: case.run(plan), plan=plan)
    for plan in protocol_plans(plans, args, site.kind):
        if not args.graph or capturable(site, plan):
            measure(plan.describe(), lambda plan=plan: case.run(plan), plan=plan)
    tuner = captured_planner() if args.graph else planner  # graph mode: the planner of replays, timed as replays
    decision = tuner.decide(site, group=group, device=device, autotune_switch=True,
                            runners=lambda s: operator_runners(s, group=group, device=device, captured=args.graph))
    chosen = fit_plan(decision.plan, site)
    predicted_choice = decision.search.chosen if decision.search is not None else None
    row["planner"] = {"plan": chosen.to_dict(), "source": decision.source,
                      "predicted_choice": predicted_choice.to_dict() if predicted_choice else None,
                      "timings_ms": {label(Plan.from_json(k)): v for k, v in decision.timings_ms.items()}}
    if decision.timings_ms:
        log("    planner's shortlist (" + decision.source + "): " + ", ".join(
            f"{name} {ms:.3f}" for name, ms in sorted(row["planner"]["timings_ms"].items(), key=lambda kv: kv[1])))
    measure("planner", lambda: case.run(chosen), plan=chosen)
    if torch_ops and args.graph:  # a capture of PyTorch's ops is the least known step: after the planner
        measure_pytorch(measure, case)
    if "sequential" in row["methods"] and "planner" in row["methods"]:
        row["paired"] = paired(case, calls["sequential"], calls["planner"], args)
        p = row["paired"]
        log(f"    paired (interleaved {PAIRED_ROUNDS} rounds): sequential {p['sequential']['median_ms']:.3f}, "
            f"planner {p['planner']['median_ms']:.3f} ms -> x{p['speedup']:.3f} "
            f"(per-round ratios p10 {p['speedup_p10']:.3f}, p90 {p['speedup_p90']:.3f})")
    torch_best = best({k: v for k, v in row["methods"].items() if k in calls}, "pytorch_async_tp")
    if torch_best is not None and "planner" in row["methods"]:
        row["paired_torch"] = paired(case, calls[torch_best[0]], calls["planner"], args, baseline=torch_best[0])
        p = row["paired_torch"]
        log(f"    paired with PyTorch: {torch_best[0]} {p[torch_best[0]]['median_ms']:.3f}, "
            f"planner {p['planner']['median_ms']:.3f} ms -> x{p['speedup']:.3f} "
            f"(per-round ratios p10 {p['speedup_p10']:.3f}, p90 {p['speedup_p90']:.3f})")
    calls.clear()  # graph mode: the case's graphs and their memory go before the next case
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    close_peer_pipes()
    H.close_contexts()
    if rank0:
        write_rows(row, site, args, provenance)
    return row


RELAY_EXECUTOR = {"host_stage_signal": "device", "host_stage_pipeline": "message", "host_stage_calls": "one"}
"""how every multi-rank host-staged relay call runs: device-side signals, each message read as soon as every
peer wrote it, one relay call per own-data-first pipeline (``hocket.validate.lines.line_signal`` and its neighbours
read these fields of a line)"""
OWN_BLOCK_ZERO = "once"
"""how an own-data-first mm_rs over a collective transport keeps its staging's own block at zero: the
buffers are zeroed when made (``hocket.validate.lines.line_own_zero``)"""


def executor_fields(case: Case, plan: Plan) -> dict:
    """What a line must record for hocket validate to price it as the executor that ran: the copy-engine
    protocol of ``plan`` (``Plan.protocol``, or the automatic choice) and the cut of a pull
    reduce-scatter's own block, the own block's zeroing of an own-data-first reduce-scatter, and the
    relay's executor and sizes (:func:`hocket.core.sizes.sizes_in_force` at the measurement)."""
    site, fields = case.site, {}
    if plan.strategy == "chunked" and plan.transport == "copy_engine" and site.kind in PEER_KINDS:
        fields["peer_protocol"] = plan_protocol(site.kind, plan)
        if site.kind == "mm_rs" and fields["peer_protocol"] == "pull":
            fields["own_block_sum"] = case.own_block_sum()  # the cut this call made
    if site.kind == "mm_rs" and plan.strategy == "chunked" and plan.order == "local_first" \
            and plan.transport != "copy_engine":
        fields["own_block_zero"] = OWN_BLOCK_ZERO
    if plan.transport == "host_staged" and site.world > 1:
        sizes = sizes_in_force()
        fields.update(RELAY_EXECUTOR, host_stage_slots=sizes.slots, host_stage_piece_bytes=sizes.piece_bytes)
    return fields


EXECUTOR_FIELDS = ("peer_protocol", "host_stage_signal", "host_stage_pipeline", "host_stage_slots", "host_stage_calls",
                   "host_stage_piece_bytes", "own_block_zero", "own_block_sum")
"""the keys :func:`executor_fields` may fill, copied from a method's entry into its results line"""


def label(plan: Plan) -> str:
    """``plan.describe()`` with its NCCL SM budget (describe() leaves it out)."""
    return plan.describe() + (f"/sms={plan.comm_sms}" if plan.comm_sms is not None else "")


def measure_pytorch(measure, case: Case) -> None:
    """PyTorch's fused ops (default, and with TORCH_SYMM_MEM_ENABLE_NATIVE_ASYNC_TP=1)."""
    measure("pytorch_async_tp", case.pytorch(native=False))
    measure("pytorch_async_tp_native", case.pytorch(native=True))


def replayed(case: Case, name: str, fn):
    """(``fn`` captured in a CUDA graph and replayed per call, None) or (None, why it was not captured),
    the same on every rank. The graph's input is a token: ``fn`` reads the case's own operands."""
    replay, message = None, ""
    try:
        replay = replayed_call(fn, case.device, what=f"{name} (bench_multigpu --graph)")
    except CHECKED_ERRORS as exc:
        message = f"{type(exc).__name__}: {str(exc)[:300]}"
    if not all_ok(not message, case.device):
        return None, message or "not captured on another rank"
    return replay, ""


PAIRED_ROUNDS = 10


def paired(case: Case, sequential, planner, args, *, baseline: str = "sequential") -> dict:
    """A baseline (sequential; or PyTorch's op, named by ``baseline``) and the planner's choice timed in
    alternating rounds (``PAIRED_ROUNDS`` of ``--iters / PAIRED_ROUNDS`` samples each), so the drift
    between two measurements taken minutes apart (clocks, the other rank, the allocator, the host's slow
    spells) falls on both: the speedup the planner gives is read from these, not from two separate
    measurements of what may be the same plan."""
    per_round = max(1, args.iters // PAIRED_ROUNDS)
    fns = {baseline: sequential, "planner": planner}
    samples: dict[str, list[float]] = {name: [] for name in fns}
    ratios = []
    for _ in range(PAIRED_ROUNDS):
        medians = {}
        for name, fn in fns.items():
            got = sample_ms(fn, iters=per_round, warmup=1, group=case.group, device=case.device, reps=args.reps)
            samples[name] += got
            medians[name] = summarize(got).median_ms
        ratios.append(medians[baseline] / medians["planner"])
    out = {name: summarize(values).to_dict() for name, values in samples.items()}
    low, high = np.percentile(ratios, [10.0, 90.0])
    out.update(speedup=out[baseline]["median_ms"] / out["planner"]["median_ms"],
               speedup_p10=float(low), speedup_p90=float(high), rounds=PAIRED_ROUNDS, per_round=per_round)
    return out


def sm_caps(args) -> tuple[int, ...]:
    """``--sm-budgets`` as ints (NCCL max CTAs per capped communicator)."""
    if not args.sm_budgets:
        return ()
    try:
        return tuple(int(c) for c in args.sm_budgets.split(","))
    except ValueError:
        raise ValueError(f"--sm-budgets={args.sm_budgets!r}: write comma-separated CTA counts, e.g. 8,32") from None


def host_variants(args) -> list[tuple[str, TransportSizes]]:
    """(name suffix, relay sizes) of each host-staged relay measured: first the sizes in force (no suffix),
    then in host_staged mode each ``--host-variants`` entry ``PIECE_MB[:SLOTS]`` (message size in MB, slot
    count 1-64, default the sizes in force), tagged `` @<MB>MB[,slots=<N>]``."""
    base = sizes_in_force()
    variants = [("", base)]
    if args.link != "host_staged" or not args.host_variants:
        return variants
    for spec in args.host_variants.split(","):
        piece_mb, *rest = spec.strip().split(":")
        slots = rest[0] if rest else ""
        try:
            if len(rest) > 1 or not piece_mb.isdigit() or not (slots or "1").isdigit():
                raise ValueError("not PIECE_MB[:SLOTS]")
            sizes = replace(base, piece_bytes=int(piece_mb) * MIB, slots=int(slots) if slots else base.slots)
        except ValueError as exc:
            raise ValueError(f"--host-variants entry {spec!r}: write PIECE_MB[:SLOTS] (whole MB > 0; SLOTS: 1-64), "
                             f"e.g. 1024 or 8:8 ({exc})") from None
        variants.append((f" @{piece_mb}MB" + (f",slots={slots}" if slots else ""), sizes))
    return variants


PEER_PROTOCOLS = PROTOCOLS[1:]
"""the copy-engine peer protocols ``--peer-protocols`` may name (``Plan.protocol``)"""


def protocol_plans(plans: list[Plan], args, kind: str) -> list[Plan]:
    """In nvlink mode, each ``chunked``/``copy_engine`` plan of ``plans`` with ``Plan.protocol`` set to each
    ``--peer-protocols`` entry the call has, other than the automatic choice (measured as the plan itself)."""
    protocols = [p.strip() for p in args.peer_protocols.split(",") if p.strip()]
    for protocol in protocols:
        if protocol not in PEER_PROTOCOLS:
            raise ValueError(f"--peer-protocols entry {protocol!r}: use one of {', '.join(PEER_PROTOCOLS)}")
    if args.link != "nvlink":
        return []
    out = []
    for plan in plans:
        if plan.strategy != "chunked" or plan.transport != "copy_engine" or plan.protocol is not None \
                or kind not in PEER_KINDS:
            continue
        out += [plan.with_(protocol=p) for p in protocols
                if available(p, kind, plan.chunks) and p != peer_protocol_for(kind, plan.chunks)]
    return list(dict.fromkeys(out))


def shrunk(site: Site, factor: int) -> Site:
    """``site`` with m, k, n divided by ``factor`` (a dry run of the whole flow, e.g. gloo on CPU)."""
    if factor <= 1:
        return site
    w = site.world
    return replace(site, m=max(w, site.m // factor // w * w), k=max(1, site.k // factor),
                   n=max(w, site.n // factor // w * w))


def predicted(site: Site, plan: Plan, cluster, profile, *, steady: bool = False) -> float | None:
    """The cost model's price of ``plan``, in the timing mode of the run (``steady``: ``--reps > 1``)."""
    try:
        return predict(site, plan, cluster, profile, steady_state=steady).total_ms
    except ValueError:
        return None


def write_rows(row: dict, site: Site, args, provenance) -> None:
    """JSON lines of every hocket plan measured (and the planner's), with the run's baselines."""
    methods = row["methods"]
    if "sequential" not in methods:
        return
    comm = min(v["median_ms"] for k, v in methods.items() if k.startswith("comm_"))
    baselines = Baselines(sequential_ms=methods["sequential"]["median_ms"],
                          compute_alone_ms=methods["compute_alone"]["median_ms"], comm_alone_ms=comm)
    extra_common = {"link": args.link, "case_name": site.name, "captured": args.graph,
                    "eager_graphs": eager_graphs(),  # under auto/on the operators replay (hocket validate skips)
                    "pytorch_async_tp_ms": methods.get("pytorch_async_tp", {}).get("median_ms"),
                    "pytorch_async_tp_native_ms": methods.get("pytorch_async_tp_native", {}).get("median_ms"),
                    "comm_ms": {k: v["median_ms"] for k, v in methods.items() if k.startswith("comm_")}}
    records = []
    for name, entry in methods.items():
        if "plan" not in entry:
            continue
        timing = Summary(median_ms=entry["median_ms"], p10_ms=entry["p10_ms"], p90_ms=entry["p90_ms"], n=entry["n"])
        prov = replace(provenance, extra={**provenance.extra, **extra_common, "method": name,
                                          "predicted_ms": entry.get("predicted_ms"),
                                          **{key: entry.get(key) for key in EXECUTOR_FIELDS},
                                          "planner_source": row["planner"]["source"] if name == "planner" else None,
                                          "paired": row.get("paired") if name == "planner" else None,
                                          "paired_torch": row.get("paired_torch") if name == "planner" else None})
        records.append(make_record(site=site, plan=Plan.from_dict(entry["plan"]), timing=timing,
                                   baselines=baselines, provenance=prov, max_error=entry.get("max_error")))
    write_records(args.out, records)


# -- table ------------------------------------------------------------------------------
def best(methods: dict, prefix: str) -> tuple[str, float] | None:
    found = [(k, v["median_ms"]) for k, v in methods.items() if k.startswith(prefix)]
    return min(found, key=lambda kv: kv[1]) if found else None


def table(rows: list[dict], link: str, graph: bool = False) -> str:
    head = (f"{'case (m k n)':26s} {'seq':>6s} {'mm':>6s} {'comm':>6s} {'torch':>6s} {'native':>6s} "
            f"{'chunk/ring':>16s} {'peer chunked':>16s} {'tile_fused':>16s} {'planner':>24s} {'x seq':>6s} "
            f"{'x torch':>7s} {'eff':>6s} {'pred':>6s}")
    lines = [f"link mode: {link}{' (every call replayed from a CUDA graph)' if graph else ''}; times in ms (medians); eff = overlap efficiency of the planner's choice, or its "
             f"speedup (x) where the possible saving is under 15%; x seq = sequential / planner and x torch = PyTorch's "
             f"faster op / planner, each from a paired (interleaved) measurement", head, "-" * len(head)]
    for row in rows:
        s, m = row["site"], row["methods"]
        if "sequential" not in m or "planner" not in m:
            lines.append(f"{s['kind']} {s['m']} {s['k']} {s['n']}: incomplete ({row['failures']})")
            continue
        seq, mm = m["sequential"]["median_ms"], m["compute_alone"]["median_ms"]
        comm = min(v["median_ms"] for k, v in m.items() if k.startswith("comm_"))
        ours = m["planner"]["median_ms"]
        torch_ms = m.get("pytorch_async_tp", {}).get("median_ms")
        native_ms = m.get("pytorch_async_tp_native", {}).get("median_ms")
        score = overlap_score(measured_ms=ours, sequential_ms=seq, compute_alone_ms=mm, comm_alone_ms=comm)

        def cell(found):
            return f"{found[1]:.3f} {found[0].split('/')[0]}" if found else "—"

        stream = min(filter(None, [best({k: v for k, v in m.items() if "/" not in k or "/p2p" in k}, "chunked("),
                                   best(m, "ring(")]), key=lambda kv: kv[1], default=None)
        vs_torch = min(filter(None, [torch_ms, native_ms]), default=None)
        pred = m["planner"].get("predicted_ms")
        x_torch = row.get("paired_torch", {}).get("speedup", vs_torch / ours) if vs_torch else None
        lines.append(
            f"{s['kind']} {s['m']} {s['k']} {s['n']:<10d} {seq:6.3f} {mm:6.3f} {comm:6.3f} "
            f"{(f'{torch_ms:6.3f}' if torch_ms else '     —')} {(f'{native_ms:6.3f}' if native_ms else '     —')} "
            f"{cell(stream):>16s} {cell(best({k: v for k, v in m.items() if '/copy_engine' in k or '/host_staged' in k}, 'chunked(')):>16s} "
            f"{cell(best(m, 'tile_fused(')):>16s} {Plan.from_dict(m['planner']['plan']).describe() + f' {ours:.3f}':>24s} "
            f"{row.get('paired', {}).get('speedup', seq / ours):6.3f} "
            f"{(f'{x_torch:7.3f}' if vs_torch else '      —')} {score.label():>6s} "
            f"{(f'{pred:6.3f}' if pred else '     —')}")
    return "\n".join(lines)


# -- main -------------------------------------------------------------------------------
def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--link", choices=("nvlink", "host_staged"), default="nvlink")
    p.add_argument("--cases", default="issue6", help=f"comma-separated shape sets: {', '.join(CASE_SETS)}")
    p.add_argument("--tokens", type=int, default=8192, help="tokens of the model shape sets")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--reps", type=int, default=1, help="calls back to back per timed sample (its mean): 1 = every "
                   "call behind its own barrier (pays the ranks' release skew and the first launch); > 1 = the "
                   "steady state of a training loop, where the host runs ahead (hocket.timing.timer)")
    p.add_argument("--seed", type=int, default=int.from_bytes(os.urandom(3), "little"))
    p.add_argument("--cluster", default=None, help="cluster preset (default: h200x2/h200x8, or h200-host-staged)")
    p.add_argument("--profile", default=None, help="calibration profile JSON for the planner (nvlink default: "
                                                    "the committed 2xH200 NCCL profile)")
    p.add_argument("--calibrate", action="store_true", help="measure contention first, give it to the planner")
    p.add_argument("--smoke", action="store_true", help="the first case only, fewer plans and runs")
    p.add_argument("--time-budget-s", type=float, default=0.0, help="start no new case after this many seconds")
    p.add_argument("--host-variants", default="", help="host_staged mode: extra PIECE_MB[:SLOTS] sizes of the "
                   "host-staged relay measured beside the sizes in force, named '<plan> @<MB>MB[,slots=<N>]', e.g. "
                   "1024,8:8 (1024 = one message per call; 8:8 = eight slots)")
    p.add_argument("--peer-protocols", default="", help="nvlink mode: copy-engine plans measured again with these "
                   "Plan.protocol values (pull, put, push) where the call has them, e.g. push")
    p.add_argument("--sm-budgets", default="", help="NCCL SM caps (max CTAs) of communicators made up front, "
                   "e.g. 8,32: calibrated beside the GEMM and tried as Plan.comm_sms (nccl only)")
    p.add_argument("--graph", action="store_true", help="check and time every method replayed from a CUDA graph "
                   "(hocket.ops.CapturedCall); plans a graph cannot capture are left out; the planner's choice is "
                   "the captured planner's, autotuned as replays")
    p.add_argument("--shrink", type=int, default=1, help="divide every case's m, k, n by this (dry runs)")
    p.add_argument("--backend", choices=("nccl", "gloo"), default="nccl", help="gloo: a CPU dry run of the flow")
    p.add_argument("--out", default=None, help="JSON lines path (default $OUT/bench_multigpu_<link>.jsonl)")
    args = p.parse_args(argv)
    if args.reps < 1:
        p.error(f"--reps={args.reps}: give an int >= 1 (calls back to back per sample)")
    if args.iters < (5 if args.smoke else 50):
        p.error(f"--iters={args.iters}: use at least 50 timed runs (5 with --smoke)")
    if args.graph and args.backend != "nccl":
        p.error(f"--graph needs --backend nccl (CUDA graphs capture GPU work), got --backend {args.backend}")
    try:
        host_variants(args)
        protocol_plans([], args, "ag_mm")
    except ValueError as exc:
        p.error(str(exc))
    if args.out is None:
        args.out = str(Path(os.environ.get("OUT", ".")) / f"bench_multigpu_{args.link}{'_graph' if args.graph else ''}.jsonl")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    ctx = init_torchrun(backend=args.backend)
    device, world = ctx.device, ctx.world_size
    rank0 = ctx.rank == 0
    log = (lambda msg: print(msg, flush=True)) if rank0 else (lambda msg: None)
    if args.link == "host_staged" and os.environ.get("NCCL_P2P_DISABLE") != "1":
        log("warning: --link host_staged without NCCL_P2P_DISABLE=1: the NCCL baselines still use NVLink")
    sites = [s for name in args.cases.split(",") for s in case_sites(name.strip(), world=world, tokens=args.tokens)]
    if args.smoke:
        sites = sites[:1]
        args.iters = min(args.iters, 20)
    cluster_name = args.cluster or ("h200-host-staged" if args.link == "host_staged"
                                    else ("h200x2" if world == 2 else "h200x8"))
    cluster = load_cluster(cluster_name)
    profile = None
    if args.profile or (args.link == "nvlink" and world == 2 and NVLINK_PROFILE.is_file()):
        profile = load_profile(args.profile or NVLINK_PROFILE, expected=None)
    group = dist.group.WORLD
    if sm_caps(args) and args.backend == "nccl":
        create_sm_budgets(resolve_group(group), sm_caps(args), device=device)
    hardware = fingerprint(cluster) if rank0 else {}
    provenance = collect(command=command_line(), hardware=hardware,
                         extra={"world": world, "backend": "nccl", "cluster": cluster_name, "iters": args.iters,
                                "reps": args.reps, "seed": args.seed, "profile": str(args.profile or (NVLINK_PROFILE if profile else ""))})
    log(f"bench_multigpu: {len(sites)} cases, world {world}, link {args.link}, cluster {cluster_name}, "
        f"iters {args.iters} x {args.reps} reps, torch {torch.__version__}")
    summary = {"link": args.link, "graph": args.graph, "world": world, "cluster": cluster_name, "command": provenance.command,
               "environment": provenance.environment, "versions": provenance.versions, "rows": []}
    if args.calibrate:
        first = Case(shrunk(sites[0], args.shrink), group=group, device=device, seed=args.seed)
        profile, detail = calibrate(first, args, profile, log)
        summary["contention"] = detail
        del first
    planner = LivePlanner(cluster=cluster, profile=profile,
                          config=LiveConfig(autotune=True, use_disk_cache=False,
                                            steady_state=args.reps > 1,
                                            tuning=AutotuneConfig(top_k=4, warmup=2, iters=16, rounds=8,
                                                                  reps=args.reps)))
    set_process_planner(planner)  # graph mode: the captured planner (and plan=None in a capture) derive from it
    started = time.monotonic()
    for i, site in enumerate(sites):
        if args.time_budget_s and time.monotonic() - started > args.time_budget_s and i:
            log(f"time budget of {args.time_budget_s:g} s spent: cases {i}..{len(sites) - 1} not measured")
            summary["not_measured"] = [s.to_dict() for s in sites[i:]]
            break
        summary["rows"].append(measure_case(site, args, group=group, device=device, cluster=cluster,
                                            profile=profile, planner=planner, provenance=provenance, log=log))
    if rank0:
        out = Path(args.out)
        out.with_suffix(".summary.json").write_text(json.dumps(summary, indent=1, default=str))
        log(f"results -> {out} (+ {out.with_suffix('.summary.json').name})\n")
        log(table(summary["rows"], args.link, args.graph))
    close_mailboxes()
    close_relays()
    close_sm_budgets()
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
