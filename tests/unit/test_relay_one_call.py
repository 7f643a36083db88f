"""One relay call for an own-data-first pipeline over ``host_staged``: the relay's messages end on the pieces'
edges, and the cost model prices the pieces as shares of one call."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.core.sizes import DEFAULT_SIZES, MIB
from hocket.cost.issue import DEFAULT_ISSUE_US
from hocket.hardware import load_preset
from hocket.strategies import pipeline_stages, predict
from hocket.transport.host_relay import HostRelay

CLUSTER = load_preset("h200-host-staged")


def relay(slot_bytes: int) -> HostRelay:
    """A relay's message arithmetic only (no group, buffer or streams)."""
    r = HostRelay.__new__(HostRelay)
    r.slot_bytes, r.piece_bytes = slot_bytes, DEFAULT_SIZES.piece_bytes
    return r


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 5000), min_size=1, max_size=9), st.integers(1, 4096), st.sampled_from([1, 2, 3]))
def test_messages_end_on_every_piece_edge_and_cover_the_call(sizes, message_elems, copies):
    edges, lo = [], 0
    for size in sizes:
        edges.append((lo, lo + size))
        lo += size
    r = relay(slot_bytes=message_elems * 2 * copies)
    pieces, last = r.split_pieces(edges, torch.bfloat16, copies=copies, piece_bytes=1024 * MIB)
    assert pieces[0][0] == 0 and pieces[-1][1] == lo  # the whole call, in order, no gaps
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert all(hi - lo_ <= message_elems for lo_, hi in pieces)  # no message above a slot's capacity
    assert len(last) == len(edges) and last == sorted(last) and last[-1] == len(pieces) - 1
    for (_, hi), index in zip(edges, last):
        assert pieces[index][1] == hi  # a piece's last message ends exactly on its edge


def test_splits_that_skip_or_overlap_are_refused_naming_the_argument():
    r = relay(slot_bytes=1 << 20)
    with pytest.raises(ValueError, match="splits="):
        r.split_pieces([(0, 10), (12, 20)], torch.float32)
    with pytest.raises(ValueError, match="splits="):
        r.split_pieces([(5, 10)], torch.float32)


def test_only_the_first_piece_is_ramped():
    r = relay(slot_bytes=1 << 30)
    r.piece_bytes = MIB  # the relay's own message size, when the caller gives none
    per = r.message_elements(torch.float32)
    pieces, last = r.split_pieces([(0, 3 * per), (3 * per, 5 * per)], torch.float32)
    sizes = [hi - lo for lo, hi in pieces]
    assert sizes[:2] == [per // 4, per // 2]  # the ramp
    assert sizes[last[0] + 1:] == [per, per]  # the second piece in whole messages


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
@pytest.mark.parametrize("chunks", [2, 5, 8])
def test_one_call_pieces_add_up_to_the_whole_call(kind, chunks):
    """The pieces' transfer times are shares of one call's price (plus its fixed part once)."""
    site = Site(kind=kind, m=8192, k=4096, n=1536, world=2, dtype="bf16")
    plan = Plan(strategy="chunked", chunks=chunks, order="local_first", transport="host_staged")
    whole = Plan(strategy="chunked", chunks=1, order="local_first", transport="host_staged")
    moves = [s for s in pipeline_stages(site, plan, CLUSTER) if s.is_transfer]
    one = [s for s in pipeline_stages(site, whole, CLUSTER) if s.is_transfer]
    assert len(moves) == chunks and len(one) == 1
    assert sum(s.duration_ms for s in moves) == pytest.approx(one[0].duration_ms, rel=1e-9)


@pytest.mark.parametrize("kind", ["ag_mm", "mm_rs"])
def test_one_call_pays_the_relay_call_once_however_many_pieces(kind):
    """Eight pieces in one call issue one relay call: raising ``relay_call`` raises the host's issue time
    by that much once, not once per piece."""
    from test_relay_signal_pricing import _issue_view

    site = Site(kind=kind, m=8192, k=4096, n=1536, world=2, dtype="bf16")
    plan = Plan(strategy="chunked", chunks=8, order="local_first", transport="host_staged")

    def issue(call_us: float) -> float:
        table = dict(DEFAULT_ISSUE_US, relay_call=call_us)
        return predict(site, plan, CLUSTER, _issue_view(table), steady_state=True).busy_ms["issue"]

    assert issue(1300.0) - issue(300.0) == pytest.approx(1.0)


def test_each_later_piece_of_one_call_pays_its_bookkeeping():
    """``relay_split`` (calibrated: one more piece of a one-call pipeline, besides its message and GEMM
    launch) is paid once per piece after the first."""
    from test_relay_signal_pricing import _issue_view

    site = Site(kind="ag_mm", m=8192, k=4096, n=1536, world=2, dtype="bf16")
    plan = Plan(strategy="chunked", chunks=8, order="local_first", transport="host_staged")

    def issue(raised: float) -> float:
        table = dict(DEFAULT_ISSUE_US, relay_split=raised)
        return predict(site, plan, CLUSTER, _issue_view(table), steady_state=True).busy_ms["issue"]

    assert issue(1000.0) - issue(0.0) == pytest.approx(7 * 1.0)
    natural = plan.with_(order="natural")  # one call per piece: no piece of a shared call
    table = dict(DEFAULT_ISSUE_US, relay_split=1000.0)
    assert predict(site, natural, CLUSTER, _issue_view(table), steady_state=True).busy_ms["issue"] == pytest.approx(
        predict(site, natural, CLUSTER, _issue_view(dict(DEFAULT_ISSUE_US, relay_split=0.0)),
                steady_state=True).busy_ms["issue"])


def test_reduction_scratch_takes_turns_and_waits_for_the_call_that_used_it_last():
    """The relay's reduction scratch: SCRATCH_RING buffers per (size, dtype), taken in turn; reusing one
    makes the H2D stream wait for the end event of the call that used it before (stream-ordered)."""
    from types import SimpleNamespace

    from hocket.transport.host_relay import SCRATCH_RING, SCRATCH_SHAPES

    waited = []
    r = relay(slot_bytes=1 << 20)
    r.device, r.watchdog, r._scratch = torch.device("cpu"), object(), {}
    r.h2d = SimpleNamespace(wait_event=waited.append)
    taken = []
    for call in range(SCRATCH_RING + 1):
        buf, slot = r.scratch(64, torch.float32)
        slot[1] = f"end of call {call}"  # what post_marked records
        taken.append(buf)
    assert len({b.data_ptr() for b in taken[:SCRATCH_RING]}) == SCRATCH_RING  # distinct buffers in turn
    assert taken[SCRATCH_RING].data_ptr() == taken[0].data_ptr()  # then the first again ...
    assert waited == ["end of call 0"]  # ... once the call that used it has ended
    other, _ = r.scratch(32, torch.float32)
    assert other.numel() == 32 and len(r._scratch) == 2
    for size in range(SCRATCH_SHAPES + 1):
        r.scratch(100 + size, torch.bfloat16)
    assert len(r._scratch) == SCRATCH_SHAPES and (64, torch.float32) not in r._scratch  # least recently used went
