"""hocket.bench on real gloo ranks: max across ranks, agreed verdicts, a measured site."""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch
import torch.distributed as dist

from hocket.bench.plans import bench_plans
from hocket.bench.suite import SuiteSpec, check_plan, measure_sites
from hocket.timing.timer import TimingConfig, max_across_ranks
from hocket.bench.workload import make_operands
from hocket.bench.calls import reference_output
from hocket.core.plan import Plan
from hocket.core.site import Site


@dataclass(frozen=True)
class Case:
    seed: int
    site: Site


def _max_task(samples_by_rank: list[list[float]]) -> list[float]:
    return max_across_ranks(samples_by_rank[dist.get_rank()])


def test_each_iteration_takes_the_slowest_rank(pool):
    iters = random.randint(2, 6)
    samples = [[random.uniform(0.1, 9.0) for _ in range(iters)] for _ in range(pool.world_size)]
    results = pool.run(_max_task, samples)
    expected = [max(column) for column in zip(*samples)]
    for got in results:
        assert got == expected


def _failed_check_on_one_rank(case: Case) -> tuple[bool, float]:
    group = dist.group.WORLD
    operands = make_operands(case.site, rank=dist.get_rank(), seed=case.seed)
    expected = reference_output(case.site, operands, group)
    if dist.get_rank() == dist.get_world_size() - 1:
        expected = expected + 1.0  # only the last rank sees a wrong result
    outcome = check_plan(case.site, Plan(), operands, expected, group=group, device=torch.device("cpu"))
    return outcome.passed, outcome.max_error


def test_a_check_failing_on_one_rank_fails_on_every_rank(pool):
    world = pool.world_size
    site = Site(kind=random.choice(["ag_mm", "mm_rs", "mm_ar"]), m=world * random.randint(2, 8),
                k=random.randint(4, 32), n=random.randint(4, 32), dtype="float32", world=world)
    verdicts = pool.run(_failed_check_on_one_rank, Case(seed=random.randrange(2**31), site=site))
    assert all(passed is False for passed, _ in verdicts)
    errors = {error for _, error in verdicts}
    assert len(errors) == 1 and errors.pop() > 0.0


def _measure(spec: SuiteSpec):
    return measure_sites(spec)


def test_measure_sites_checks_times_and_agrees_across_ranks(pool2):
    sites = []
    for kind in ("ag_mm", "mm_rs", "mm_ar"):
        site = Site(kind=kind, m=2 * random.randint(8, 32), k=random.randint(8, 64), n=random.randint(8, 64),
                    dtype=random.choice(["float32", "bfloat16"]), world=2)
        sites.append((site, bench_plans(kind, strategies=("chunked",), chunks=(2, 3))))
    spec = SuiteSpec(sites=tuple(sites), timing=TimingConfig(warmup=0, iters=3), rounds=2,
                     seed=random.randrange(2**31), show_progress=False)
    per_rank = pool2.run(_measure, spec)
    assert per_rank[0] == per_rank[1]  # times and verdicts are reduced across ranks
    for outcome, (site, plans) in zip(per_rank[0], sites):
        assert outcome.site == site
        assert [p.plan for p in outcome.plans] == list(plans)
        for p in outcome.plans:
            assert p.passed, (site, p)
            assert p.timing is not None and p.timing.n == 3
        assert outcome.compute_alone.n == 3 and outcome.comm_alone.n == 3
        assert outcome.sequential is not None


@dataclass(frozen=True)
class RingCase:
    seed: int
    rows: int
    cols: int


def _rings_match_collectives(case: RingCase) -> tuple[float, float, float]:
    from hocket.bench.p2p_ring import ring_all_gather, ring_all_reduce, ring_reduce_scatter
    from hocket.launch.same_case import rank_generator
    from hocket.transport.group import resolve_group
    from hocket.transport.torch_dist import TorchDistTransport

    handle = resolve_group(dist.group.WORLD)
    rank, world = handle.rank, handle.world
    transport = TorchDistTransport(handle)
    gen = rank_generator(case.seed)
    shard = torch.randn(case.rows, case.cols, generator=gen, dtype=torch.float64)
    gathered = torch.zeros(world * case.rows, case.cols, dtype=torch.float64)
    gathered[rank * case.rows:(rank + 1) * case.rows] = shard
    ring_all_gather(transport, gathered, rank, world)()
    expected = torch.empty_like(gathered)
    transport.all_gather(expected, shard).wait()
    ag_err = (gathered - expected).abs().max().item()

    full = torch.randn(world * case.rows, case.cols, generator=gen, dtype=torch.float64)
    out = torch.empty(case.rows, case.cols, dtype=torch.float64)
    ring_reduce_scatter(transport, full, out, rank, world)()
    want = torch.empty_like(out)
    transport.reduce_scatter(want, full.clone()).wait()
    rs_err = (out - want).abs().max().item()

    uneven = torch.randn(world * case.rows + 1, case.cols, generator=gen, dtype=torch.float64)
    want_ar = uneven.clone()
    transport.all_reduce(want_ar).wait()
    ring_all_reduce(transport, uneven, rank, world)()
    ar_err = (uneven - want_ar).abs().max().item()
    return ag_err, rs_err, ar_err


def test_p2p_ring_collectives_match_the_backend(pool):
    case = RingCase(seed=random.randrange(2**31), rows=random.randint(1, 9), cols=random.randint(1, 17))
    for errors in pool.run(_rings_match_collectives, case):
        assert max(errors) < 1e-12, errors
