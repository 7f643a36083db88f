"""How many reduction buffers a host-staged relay (:mod:`hocket.transport.host_relay`) keeps.

Plain Python, so the planner's memory estimate (:mod:`hocket.plan.memory`) counts them without
importing torch.
"""

SCRATCH_RING = 2
"""reduction scratch buffers a relay keeps per (size, dtype): the calls in flight take turns on them"""
SCRATCH_SHAPES = 4
"""(size, dtype) rings a relay keeps (the least recently used one goes first)"""
