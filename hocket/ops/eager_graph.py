"""Eager operator calls replayed from CUDA graphs hocket captures itself (``HOCKET_EAGER_GRAPHS``).

An overlapped plan issues many small items per call (GEMM pieces, copies, stream waits, relay
messages). Where the host issues them slower than the device runs them, a call runs at the host's
pace, and on a slow host an overlapped plan can lose to the sequential one it should beat.
``hocket.ops.CapturedCall`` removes that cost for code that wraps its step in it. With
``HOCKET_EAGER_GRAPHS=auto`` (or ``on``) plain eager calls get it too:

* the first call of a signature (operator, group, shapes, dtypes, plan, flags: one
  ``hocket.ops.dispatch.Prepared``) runs as usual;
* the second captures the call in a ``CapturedCall`` (one warm-up call, then the capture) and replays it;
* every later call copies its tensors into the graph's inputs, replays, and returns *clones* of the
  graph's outputs, so each call returns fresh tensors as an eager call does.

Whether a signature is replayed is decided once, when it is prepared, and agreed across ranks (rank 0's
answer, :func:`hocket.ops.agreement.settle_replay`), and so is its capture (:func:`hocket.ops.agreement.all_ranks_ok`:
where any rank fails to capture, every rank warns and issues the signature eagerly): ``on`` replays every plan a graph can capture;
``auto`` only where the cost model prices the replay with its copies below the call issued by the host
(:mod:`hocket.plan.eager_graphs`), which is where the host is the bottleneck (small shapes, many pieces,
slow hosts). ``plan=None`` under ``auto``/``on`` weighs every candidate both ways.

What it costs: the copies (every input in, every output out: about half a microsecond per MiB on an H200);
a private memory pool per graph that holds the call's inputs, outputs and scratch for as long as the
process runs, so at most :func:`max_graphs` signatures (default 32, :func:`set_max_graphs`) are replayed
and further ones run eagerly (every rank counts the same calls, and the limit is in the agreement
descriptor, so they agree). Calls made while a stream is being
captured (inside ``CapturedCall``, ``torch.cuda.graph`` or torch.compile's CUDA graphs) are issued into
that capture as usual. The graph replays on the caller's current stream.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch.utils import _pytree as pytree

from hocket.core.sizes import EAGER_GRAPHS_MAX


class EagerGraphWarning(UserWarning):
    """A call hocket meant to replay could not be captured; it is issued eagerly instead."""


EAGER_CALLS_BEFORE_CAPTURE = 1
"""calls of a signature issued by the host before its capture: a one-off call never pays a capture."""

_GRAPHS = {"count": 0}
"""how many signatures this process replays (each holds a graph and its memory pool)."""


_LIMIT = {"graphs": EAGER_GRAPHS_MAX}
"""how many signatures this process may replay (:func:`set_max_graphs`)."""


def graphs_in_use() -> int:
    return _GRAPHS["count"]


def max_graphs() -> int:
    """How many calls' CUDA graphs this process keeps under ``HOCKET_EAGER_GRAPHS`` (default
    ``hocket.core.sizes.EAGER_GRAPHS_MAX``, 32); each holds its own memory pool (the call's inputs, outputs
    and scratch), so calls of further signatures run eagerly. 0: none are replayed."""
    return _LIMIT["graphs"]


def set_max_graphs(count: int | None) -> int:
    """Make ``count`` (None: the default, 32) the limit of :func:`max_graphs` for signatures prepared from now
    on; returns the limit it replaces. Set the same on every rank: it is in the agreement descriptor."""
    if count is None:
        count = EAGER_GRAPHS_MAX
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"count={count!r} must be a whole number of graphs >= 0 (default {EAGER_GRAPHS_MAX}), "
                         f"or None for the default")
    previous = _LIMIT["graphs"]
    _LIMIT["graphs"] = count
    return previous


def release_all() -> None:
    """Start counting again (``hocket.ops.dispatch.clear_prepared_cache``: the graphs are freed with the
    Prepared entries that hold them)."""
    _GRAPHS["count"] = 0


class EagerGraph:
    """One prepared signature's calls: issued by the host at first, then replayed (module docstring)."""

    def __init__(self, run: Callable, label: str, device: torch.device, *, limit: int,
                 agree: Callable[[bool], bool] | None = None) -> None:
        self.run = run
        self.agree = agree
        """``agree(ok) -> bool``: whether every rank captured (:func:`hocket.ops.agreement.all_ranks_ok` over
        the call's group); None: this process alone decides"""
        self.label = label
        self.device = device
        self.limit = limit
        self.calls = 0
        self.step = None
        """the ``CapturedCall`` once captured"""
        self.eager_only = False
        """True once the process's graph limit turned this signature down"""
        self.consts: list | None = None
        self.spec = None

    def __call__(self, *args):
        if self.step is None:
            self.calls += 1
            if self.eager_only or self.calls <= EAGER_CALLS_BEFORE_CAPTURE:
                return self.run(*args)
            if _GRAPHS["count"] >= self.limit:
                self.eager_only = True
                return self.run(*args)
            if not self._capture(args):
                return self.run(*args)
        leaves, spec = pytree.tree_flatten(args)
        tensors = [leaf for leaf in leaves if isinstance(leaf, torch.Tensor)]
        if spec != self.spec or [leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)] != self.consts:
            raise RuntimeError(f"{self.label}: a replayed call's arguments changed structure since its capture "
                               f"({spec} against {self.spec}); this is a hocket bug, please report it")
        out = self.step(*tensors)
        return pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)

    def _capture(self, args: tuple) -> bool:
        """Capture the call made with ``args``; False (every rank, when ``agree`` is given) when any rank
        could not, and this signature stays eager."""
        from hocket.ops.captured import CapturedCall

        leaves, self.spec = pytree.tree_flatten(args)
        self.consts = [leaf for leaf in leaves if not isinstance(leaf, torch.Tensor)]
        slots = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
        template = [None if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves]
        spec, run = self.spec, self.run

        def call(*tensors: torch.Tensor):
            filled = list(template)
            for i, t in zip(slots, tensors):
                filled[i] = t
            return run(*pytree.tree_unflatten(filled, spec))

        step, error = None, None
        try:
            step = CapturedCall(call, *[leaves[i] for i in slots], warmup=1, what=self.label)
        except Exception as exc:  # noqa: BLE001 - any failure to capture: every rank goes on eagerly
            error = exc
        ok = self.agree(error is None) if self.agree is not None else error is None
        if not ok:
            self.eager_only = True
            where = f"{type(error).__name__}: {error}" if error is not None else "it failed on another rank"
            warnings.warn(f"{self.label}: the call could not be captured in a CUDA graph ({where}); this signature's "
                          f"calls are issued eagerly from now on", EagerGraphWarning, stacklevel=4)
            return False
        _GRAPHS["count"] += 1
        self.step = step
        return True
