"""Host issue overhead: the CPU time a Python executor spends putting each piece's work on
the GPU's queues.

On a GPU rank the executors (``hocket.ops.lowering``) never block the host: every launch,
collective call, P2P exchange and event wait only enqueues work. The host still spends
time on each one (Python, the torch dispatcher, NCCL's enqueue, CUDA's launch path), one
after another on one thread. A GPU stage cannot start before the host has issued it, so
the issue times form a chain the pipeline runs beside (the ``issue`` resource of
``hocket.cost.stages``):

* a pipeline whose pieces run longer on the GPU than they take to issue hides the issue
  chain entirely (the host runs ahead);
* pieces shorter than their issue time make the pipeline *issue-bound*: more pieces
  (chunks, ring sub-steps, two ring lanes) then cost wall time even when every piece
  overlaps perfectly on the GPU, which is how overlap loses on small shapes;
* every call starts with the GPU idle (the operator's entry: argument checks, the plan
  lookup, buffer lookups), so ``entry`` is always paid once. The first item's own issue
  latency is not charged again: the transfer and kernel times already hold one call's
  overhead (and calibrated curves were timed from an idle GPU, launch included).

The defaults below are documented per-call host costs of eager PyTorch on a server CPU
(torch op dispatch plus a CUDA launch ~10 us; a ``torch.distributed`` call through the
ProcessGroupNCCL work object ~30-40 us; ``batch_isend_irecv`` builds and coalesces P2P ops,
~60 us; a side-stream copy with its event record and wait ~50 us, as the single-GPU
offload calibration sites show: 32 pieces of h2d_mm 8192x3584x8192 take 55 us each, of
mm_d2h 8192x8192x1280 72 us each, for 20-40 us of device work; a host-handshake relay call ~0.25 ms plus ~0.05 ms per message, as the
calling-thread relay's chunked(8) pieces on the 2xH200 calibration sites show: 0.37-0.42 ms
each for 0.15-0.29 ms of PCIe time; a device-signal relay call ~0.09 ms plus ~0.01 ms per message:
2xH200, ag_mm 8192x4096x1536 host time per call: sequential
NCCL 104 us, sequential over the relay (6 messages) 183 us, chunked(4)/chunked(8) local_first
(one-message relay calls) 635/1126 us, i.e. ~120 us per extra piece with its GEMM launch). Its
defaults nevertheless stay at the handshake relay's 250 + 50 us: each device-signal message also
waits on the device for its signal (comm alone exceeds a pipelined host-link copy by ~0.1 ms per
message), which the relay's pipeline price (``hocket.cost.comm``) does not hold yet, and
the larger host figures stand in for it (with 90 + 10 the host-staged held-out decisions got worse:
saving sign right 67.5% against 80%, regret of the predicted best 1.145 against 1.020; every figure here:
benchmarks/results/validation/2026-12-01_measured-rules.md). ``hocket calibrate`` measures them on the machine
(``issue_us`` in the profile,
``hocket.calibrate.issue``), and a profile's values replace the defaults. CPU
ranks (gloo) run compute on the issuing thread itself and block in every collective, so
their issue cost is part of the launch and call overheads, not a separate chain.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

ISSUE_OPS = ("entry", "group_entry", "launch", "collective", "p2p", "copy_engine", "host_copy", "relay_call",
             "relay_message", "relay_split", "fused_call", "fused_push")
"""What the host issues: the operator's entry (``group_entry``: what an operator on a process
group adds to it: the torch.library dispatch of its schema, the plan and group lookups and the
cross-rank agreement check; on 2xH200 a whole sequential ag_mm call took 167-189 us of
host time on two leases, 100 us more than entry + collective + launch), one kernel launch (GEMM, copy, reduction),
one collective call, one P2P exchange (send + receive of a ring step), one copy-engine
transfer (symmetric-memory copies and their signals), one device<->pinned-host copy on a
side stream with its event (or flag) waits, one host-staged relay call and each of its
messages (``hocket.transport.host_relay``): ``relay_call``/``relay_message`` with device signals
(slot views, two async copies, two stream memory operations; the call's event, watchdog entry and
stream switches); ``relay_split``: what one more piece of an own-data-first pipeline in its *one*
relay call costs the host besides its message and its GEMM launch (the piece's event, the wait on
it, its slices and bookkeeping). Items a profile holds besides these are ignored.
``fused_call``: what a ``tile_fused`` call between GPUs (``hocket.ops.lowering.tile_fused``) issues besides
its entry, its copy-engine pushes and one launch: the peer pipe's begin (barrier, flag resets) and end, the
Triton launch of the persistent GEMM with its workspace, the flag raises and waits, the error watch;
``fused_push``: each flag-gated push of a producer group (matmul + reduce-scatter: its spin-wait launch)."""

DEFAULT_ISSUE_US: Mapping[str, float] = {
    "entry": 20.0,
    "group_entry": 100.0,
    "launch": 10.0,
    "collective": 35.0,
    "p2p": 60.0,
    "copy_engine": 50.0,
    "host_copy": 50.0,
    "relay_call": 250.0,
    "relay_message": 50.0,
    "relay_split": 30.0,
    "fused_call": 450.0,
    "fused_push": 40.0,
}
"""Host microseconds per issued item when the profile has no ``issue_us`` (see module docstring).

The ``fused_*`` items (no calibration measures them) are set on one 2xH200 lease, at that lease's host speed
(``FUSED_REFERENCE_US``), from a calibration site of ``hocket validate`` only: eager
tile_fused(1)/copy_engine calls of mm_rs 8192x2048x4096 timed back to back ran host-bound at 0.747 ms (device
work ~0.35 ms), against 0.259 ms of host time the other items price on that lease's profile: 488 us more per
call, for the call and its one flag-gated push. ``benchmarks/host_profile.py`` on the same lease puts such a push
at 65-90 us of host time against 25 for an ungated copy-engine copy: ``fused_push`` 40, ``fused_call`` 450.
(The held-out ag_mm 8192x4096x1536 ran 0.736 ms there; priced 0.712 with them.) Without them eager tile_fused
calls on small shapes were priced device-bound at 0.28-0.35 ms and chosen, and ran 0.57-0.75 ms
(benchmarks/results/validation/2026-12-01_measured-rules.md)."""

FUSED_REFERENCE_US: Mapping[str, float] = {"launch": 17.3, "collective": 54.8, "copy_engine": 25.0, "p2p": 101.2}
"""The measured ``issue_us`` of the lease the ``fused_*`` costs were set on, for the items the ``fused_*`` costs
scale with: a profile whose host issues these faster or slower (the same calls' costs differ up to 2x between
leases) scales ``fused_*`` by the median of its ratios to these (:func:`host_speed`)."""


def issue_table(calibration=None) -> dict[str, float]:
    """The per-item host issue costs in us: the profile's measured ``issue_us`` where present
    (finite, >= 0), the defaults elsewhere. A measured ``entry`` is what ``hocket calibrate`` times:
    a multi-rank operator's whole entry (a sequential all_gather_matmul less its collective and
    launch), i.e. ``entry + group_entry`` here: it replaces their sum, the single-device ``entry``
    keeping its default (unless the profile also gives ``group_entry``)."""
    table = dict(DEFAULT_ISSUE_US)
    measured = getattr(getattr(calibration, "profile", calibration), "issue_us", None) or {}
    valid = {op: float(value) for op, value in measured.items()
             if op in table and isinstance(value, (int, float)) and math.isfinite(value) and value >= 0}
    table.update(valid)
    speed = host_speed(valid)
    for op in ("fused_call", "fused_push"):
        if op not in valid:
            table[op] *= speed
    if "entry" in valid and "group_entry" not in valid:
        table["entry"] = min(valid["entry"], DEFAULT_ISSUE_US["entry"])
        table["group_entry"] = valid["entry"] - table["entry"]
    return table


def host_speed(measured: Mapping[str, float]) -> float:
    """How much slower (> 1) or faster than the host of ``FUSED_REFERENCE_US`` a profile's host issues: the
    median of its measured items over ``FUSED_REFERENCE_US`` (1.0 when it measured none of them)."""
    ratios = sorted(measured[op] / ref for op, ref in FUSED_REFERENCE_US.items() if measured.get(op, 0) > 0)
    if not ratios:
        return 1.0
    mid = len(ratios) // 2
    return ratios[mid] if len(ratios) % 2 else (ratios[mid - 1] + ratios[mid]) / 2


def issue_ms(items, table: Mapping[str, float]) -> float:
    """Host time to issue ``items``: ``(op, count)`` pairs, ``op`` one of ``ISSUE_OPS``."""
    total = 0.0
    for op, count in items:
        if op not in ISSUE_OPS:
            raise ValueError(f"issue op={op!r} is unknown; use one of {ISSUE_OPS}")
        if count < 0:
            raise ValueError(f"issue count={count} for {op!r} must be >= 0")
        total += count * table[op] / 1e3
    return total
