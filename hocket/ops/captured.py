"""Operator calls captured in a CUDA graph: one replay instead of the host issuing every piece.

An overlapped plan issues many small items per call (GEMM pieces, copies, stream waits, relay
messages); on a slow host their issue time can exceed the device time, and the call then runs at
the host's pace (2xH200, slow link: 0.8-1.7 ms of host time per ``chunked(4)/host_staged`` call
beside ~1.1 ms on the device). :class:`CapturedCall` captures ``fn(*inputs)`` once with
``torch.cuda.graph`` and then replays it: the host cost of a call is one copy per input and the
replay.

    step = hocket.ops.CapturedCall(lambda a, b: hocket.ops.all_gather_matmul(a, [b], 0, group, plan=plan)[1][0],
                                   a, b)
    out = step(a_next, b)       # copies the inputs into the graph's, replays, returns the graph's output

Every rank of the group must build its CapturedCall and call it the same number of times in the
same order as the others, as with eager calls (a replay's collectives and relay messages meet the
peers' replays). The output tensor is the graph's own: the next call overwrites it (clone to keep
it). ``fn`` runs ``warmup`` times eagerly on a side stream first (the torch recipe: first calls
plan, agree across ranks, build transports and compile kernels, none of which a capture can do).
Operator calls in ``fn`` with ``plan=None`` are planned for replays
(:func:`hocket.ops.planning.captured_planning`: priced with no host issue cost but the replay's, cached
apart from the same site's eager calls), so a pipeline of many pieces that the host could not keep fed
eagerly can be chosen here. The choice is by prediction; with ``HOCKET_AUTOTUNE=1`` (or
``hocket.ops.live.tune(site, captured=True)`` beforehand) the candidates are timed as replays, during
the warm-up.

A CapturedCall keeps the operator context buffers its graph uses alive as long as itself
(``hocket.ops.context.recording_buffers``): a context that drops them later cannot free memory a replay still
writes. What a capture holds: NCCL collectives (PyTorch captures them) and the host-staged relay, whose copy
streams signal each other through the shared buffer themselves (``hocket.transport.host_relay``). A relay call
in a replay has no host to watch it, so each replay's end is handed to the relays the capture used, whose
watchdog bounds it like an eager call (``HOCKET_TIMEOUT_S``). Copy-engine plans over symmetric memory capture
where they run a barrier protocol (pull or put: an all-gather by rows, a one-piece reduce-scatter); inside a
CapturedCall their calls use slots of their own and close on a second device-side barrier
(``hocket.ops.lowering.peer_pull``), so a replay never overwrites a slot a peer still reads. Their barrier is
bounded on the device (``HOCKET_TIMEOUT_S``) as in an eager call, whose timeout traps the waiting kernel and
leaves that process's CUDA context unusable; a replay whose peer never replays ends the same way (2xH200: a
CUDA error after 3.4-3.6 s with ``HOCKET_TIMEOUT_S=3``, ``tests/gpu/test_peer_timeout_nccl.py``;
benchmarks/results/validation/2026-12-01_measured-rules.md). The
push protocol, ``tile_fused`` and peer reads check device error flags from the host and are not captured: a
call with one raises during capture with the reason (``hocket.plan.capture``), and ``plan=None`` chooses among
the plans a graph captures.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from hocket.ops.context import recording_buffers

CAPTURE_ERROR_MODES = ("global", "thread_local", "relaxed")


class CapturedCall:
    """``fn(*inputs)`` captured in a CUDA graph (see the module docstring)."""

    def __init__(self, fn: Callable[..., object], *inputs: torch.Tensor, warmup: int = 2,
                 capture_error_mode: str = "thread_local", what: str = "captured call") -> None:
        if not callable(fn):
            raise TypeError(f"fn={fn!r} must be callable: the operator call to capture")
        if isinstance(warmup, bool) or not isinstance(warmup, int) or warmup < 1:
            raise ValueError(f"warmup={warmup!r} must be an int >= 1: eager calls before the capture (first calls "
                             f"plan, agree across ranks and build transports, which a capture cannot do)")
        if capture_error_mode not in CAPTURE_ERROR_MODES:
            raise ValueError(f"capture_error_mode={capture_error_mode!r} must be one of {CAPTURE_ERROR_MODES} "
                             f"(torch.cuda.graph's)")
        if not inputs:
            raise ValueError("CapturedCall needs the example inputs fn is called with (their shapes, dtypes and "
                             "devices are the graph's)")
        for i, t in enumerate(inputs):
            if not isinstance(t, torch.Tensor) or t.device.type != "cuda":
                raise ValueError(f"inputs[{i}] must be a CUDA tensor (got "
                                 f"{type(t).__name__ if not isinstance(t, torch.Tensor) else t.device}): "
                                 f"CUDA graphs capture GPU work only")
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("CapturedCall was built while a CUDA graph is being captured; build it outside")
        self.what = what
        self.inputs = tuple(t.detach().clone() for t in inputs)
        """the graph's inputs: each call copies its arguments into these"""
        from hocket.ops.planning import captured_planning
        from hocket.transport import host_relay

        side = torch.cuda.Stream(self.inputs[0].device)
        side.wait_stream(torch.cuda.current_stream(self.inputs[0].device))
        with captured_planning(), torch.cuda.stream(side):  # plan=None: planned for replays
            for _ in range(warmup):
                fn(*self.inputs)
        torch.cuda.current_stream(self.inputs[0].device).wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        before = len(host_relay.CAPTURED)
        try:
            with captured_planning(), recording_buffers() as buffers, \
                    torch.cuda.graph(self.graph, capture_error_mode=capture_error_mode):
                self.output = fn(*self.inputs)
        finally:
            used = host_relay.CAPTURED[before:]
            del host_relay.CAPTURED[before:]
        self.buffers = tuple({id(b): b for b in buffers}.values())
        """the context buffers the graph reads and writes, kept alive as long as it (hocket.ops.context)"""
        self.relays = tuple(dict.fromkeys(used))
        """the host-staged relays the graph's calls run through (their watchdogs bound each replay)"""

    def __call__(self, *inputs: torch.Tensor) -> object:
        """Copy ``inputs`` into the graph's (skipped for the graph's own tensors), replay, and return the
        graph's output (overwritten by the next call)."""
        self._copy_in(inputs)
        self.graph.replay()
        if self.relays:
            done = torch.cuda.current_stream(self.inputs[0].device).record_event()
            for relay in self.relays:
                relay.track_replay(done, f"{self.what} (a CUDA graph replay)")
        return self.output

    def _copy_in(self, inputs: Sequence[torch.Tensor]) -> None:
        if len(inputs) != len(self.inputs):
            raise ValueError(f"{self.what} takes {len(self.inputs)} inputs (as captured), got {len(inputs)}")
        for i, (mine, given) in enumerate(zip(self.inputs, inputs)):
            if given is mine:
                continue
            if not isinstance(given, torch.Tensor) or given.shape != mine.shape or given.dtype != mine.dtype \
                    or given.device != mine.device:
                raise ValueError(f"inputs[{i}] must match the captured one: shape {tuple(mine.shape)}, dtype "
                                 f"{mine.dtype}, device {mine.device}; got "
                                 f"{_describe(given)} (capture another CapturedCall for another shape)")
            mine.copy_(given)


def _describe(t: object) -> str:
    if not isinstance(t, torch.Tensor):
        return type(t).__name__
    return f"shape {tuple(t.shape)}, dtype {t.dtype}, device {t.device}"


def replayed(fn: Callable[[], object], device: torch.device | str, *, what: str = "captured call",
             warmup: int = 2) -> Callable[[], object]:
    """``fn()`` (closing over its own operands, which keep their addresses) captured in a CUDA graph on
    ``device``; the returned callable replays it and returns the graph's output. For timing a call as a
    loop of replays runs it (autotuning, calibration, benchmarks): the graph's only input is a token."""
    step = CapturedCall(lambda _token: fn(), torch.zeros(1, device=device), warmup=warmup, what=what)
    return lambda: step(*step.inputs)

