"""gloo (CPU ranks) collectives priced as ProcessGroupGloo runs them (hocket.cost.comm.gloo_memory_traffic)."""

from __future__ import annotations

import math
import random

import pytest

from hocket.cost.comm import (
    FIRST_TOUCH_US_PER_PAGE,
    GLOO_MMAP_THRESHOLD_BYTES,
    LINK_EFFICIENCY,
    PAGE_BYTES,
    collective,
    gloo_memory_traffic,
    group_topology,
    ring_step,
)
from hocket.hardware import load_preset

CPU = load_preset("cpu-host")
H100X8 = load_preset("h100x8")


def _pass_ms(topo, nbytes: float) -> float:
    """One local copy pass: half a wire byte (module doc of _gloo_collective)."""
    return nbytes / (2 * topo.ring_gbps * LINK_EFFICIENCY["cpu_collective"] * 1e6)


def _touch_ms(nbytes: float) -> float:
    return math.ceil(nbytes / PAGE_BYTES) * FIRST_TOUCH_US_PER_PAGE / 1e3 if nbytes > GLOO_MMAP_THRESHOLD_BYTES else 0.0


@pytest.mark.parametrize("world", [2, 4])
def test_gloo_all_gather_is_a_ring_plus_the_copies_into_and_out_of_a_fresh_buffer(world):
    topo = group_topology(CPU, range(world))
    nbytes = world * random.randint(1 << 16, 1 << 26)
    shard = nbytes / world
    ag = collective("all_gather", nbytes, topo)
    wire_bytes_ms = 2 * _pass_ms(topo, (world - 1) * shard)  # the ring's p-1 steps of a shard
    copies_ms = _pass_ms(topo, shard + nbytes)  # own shard into the flat buffer, flat buffer out
    assert ag.algorithm == "ring+copies"
    floor_ms = wire_bytes_ms + copies_ms + _touch_ms(nbytes)
    assert floor_ms <= ag.ms <= floor_ms + 1.0  # plus call and per-step latencies (well under 1 ms)
    assert ag.ms > ring_step(shard, topo).ms * (world - 1)  # never P2P speed


def test_gloo_all_gather_is_several_times_a_p2p_exchange_at_tens_of_mib():
    # measured on the CI machine (benchmarks/results/gloo_world2.jsonl): 3-5x at 32-128 MiB
    topo = group_topology(CPU, range(2))
    ratios = []
    for mib in (32, 128):
        nbytes = mib << 20
        ratios.append(collective("all_gather", nbytes, topo).ms / ring_step(nbytes / 2, topo).ms)
    assert 2.0 < ratios[0] < ratios[1] < 8.0


def test_gloo_reduce_scatter_is_clone_all_reduce_and_chunk_copy():
    topo = group_topology(CPU, range(2))
    nbytes = random.choice([1 << 20, 24 << 20, 96 << 20]) + 2 * random.randint(0, 1 << 16)
    rs = collective("reduce_scatter", nbytes, topo)
    ar = collective("all_reduce", nbytes, topo)
    assert rs.algorithm == "clone+allreduce+chunk"
    assert rs.ms == pytest.approx(ar.ms + _pass_ms(topo, nbytes + nbytes / 2) + _touch_ms(nbytes), rel=1e-9)


def test_fresh_buffers_fault_their_pages_only_above_the_mmap_threshold():
    topo = group_topology(CPU, range(2))
    below, above = GLOO_MMAP_THRESHOLD_BYTES, GLOO_MMAP_THRESHOLD_BYTES + 2 * PAGE_BYTES
    jump = collective("all_gather", above, topo).ms - collective("all_gather", below, topo).ms
    pages = math.ceil(above / PAGE_BYTES)
    assert jump == pytest.approx(pages * FIRST_TOUCH_US_PER_PAGE / 1e3, rel=0.01)
    _, _, fresh = gloo_memory_traffic("all_reduce", above, 2)
    assert fresh == 0.0  # all-reduce runs in place


def test_nccl_collectives_are_untouched_by_the_gloo_mechanism():
    gpu = group_topology(H100X8, range(8))
    nbytes = 256 << 20
    assert collective("all_gather", nbytes, gpu).algorithm == "ring"
    assert collective("reduce_scatter", nbytes, gpu).ms < 0.6 * collective("all_reduce", nbytes, gpu).ms
