"""Which plans a CUDA graph can capture (``hocket.ops.CapturedCall``), and why the others cannot.

A graph replays the device work a call issued during capture; nothing the host would do per call
(read a flag, check an error buffer, hand a message over) happens in a replay. So a plan captures
when every ordering between ranks its call needs is device-side and its values are the same in
every replay:

* transports of ``CAPTURABLE_TRANSPORTS``: NCCL's collectives and point-to-point (PyTorch captures
  them) and the host-staged relay with device signals (constant per-slot flags);
* ``chunked`` over ``copy_engine`` where :mod:`hocket.core.peer_protocol` runs a barrier protocol
  (``Plan.protocol``, else the automatic choice: ``pull`` or ``put``, the all-gather by rows and the
  one-piece reduce-scatter; the rule is the ``chunked`` spec's): the order between
  ranks is one device-side barrier of the group, and inside ``CapturedCall`` the call uses slots of its
  own with a second barrier at its end (``hocket.ops.lowering.peer_pull``), so a replay never writes a
  slot a peer may still read;
* not the ``push`` protocol (several-piece reduce-scatter, all-reduce) nor ``tile_fused`` and
  ``peer_read``: their flag waits report timeouts through error buffers the host checks after the call.
"""

from __future__ import annotations

from hocket.core.peer_protocol import BARRIER_PROTOCOLS
from hocket.core.plan import CAPTURABLE_TRANSPORTS, Plan
from hocket.core.site import Site
from hocket.strategies import spec

__all__ = ["BARRIER_PROTOCOLS", "capturable", "capture_refusal", "needs_captured_call"]


def capture_refusal(site: Site, plan: Plan) -> str | None:
    """None when a CUDA graph can capture ``plan`` for ``site``, else why not (one sentence): the
    transports of ``CAPTURABLE_TRANSPORTS`` always capture; otherwise the strategy's spec decides
    (``StrategySpec.capture_refusal``), given the generic refusal."""
    if plan.transport in CAPTURABLE_TRANSPORTS or site.world == 1:
        return None
    refusal = (f"transport={plan.transport!r} with strategy={plan.strategy!r} reports its waits through error "
               f"buffers the host checks after each call")
    rule = spec(plan.strategy).capture_refusal
    return refusal if rule is None else rule(site, plan, refusal)


def capturable(site: Site, plan: Plan) -> bool:
    return capture_refusal(site, plan) is None


def needs_captured_call(plan: Plan) -> bool:
    """Whether a capture of ``plan`` must go through ``hocket.ops.CapturedCall`` (its copy-engine calls
    then use slots of their own and end on a barrier; a bare ``torch.cuda.graph`` would replay the
    double-buffered eager protocol with one parity baked in)."""
    return plan.transport == "copy_engine"
