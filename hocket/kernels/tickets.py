"""Tile tickets of the persistent GEMMs (Triton device functions).

A persistent launch walks a tile table. ``DYNAMIC=False``: program ``p`` takes tiles
``p, p + P, p + 2P, ...`` (fixed in advance). ``DYNAMIC=True``: every program takes the
next untaken tile from a counter (``ticket_ptr[0]``, one relaxed atomic per tile), so a
program that finished early (a narrow tile, a short wait) goes on with the next tile in
table order instead of idling while another program still has a queue.

The counter resets itself: each program bumps ``ticket_ptr[1]`` when it leaves; the last
one zeroes both words, so the next launch on the stream starts at tile 0 without a memset.
The buffer's size, ``TICKET_WORDS``, is in :mod:`hocket.kernels.schedule` (plain Python), so the
workspaces that allocate it import without Triton.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def first_tile(ticket_ptr, DYNAMIC: tl.constexpr):
    if DYNAMIC:
        t = tl.atomic_add(ticket_ptr, 1, sem="relaxed", scope="gpu")
    else:
        t = tl.program_id(0)
    return t


@triton.jit
def next_tile(ticket_ptr, t, num_programs, DYNAMIC: tl.constexpr):
    if DYNAMIC:
        t = tl.atomic_add(ticket_ptr, 1, sem="relaxed", scope="gpu")
    else:
        t += num_programs
    return t


@triton.jit
def finish_tickets(ticket_ptr, num_programs, DYNAMIC: tl.constexpr):
    """The last program to leave zeroes the counter (every other program has taken its
    final ticket by then)."""
    if DYNAMIC:
        left_before = tl.atomic_add(ticket_ptr + 1, 1, sem="acq_rel", scope="gpu")
        if left_before == num_programs - 1:
            tl.atomic_xchg(ticket_ptr, 0, sem="relaxed", scope="gpu")
            tl.atomic_xchg(ticket_ptr + 1, 0, sem="release", scope="gpu")
