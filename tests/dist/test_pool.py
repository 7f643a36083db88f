"""RankPool and spawn: results by rank, failures named by rank, timeouts, no leftovers."""

from __future__ import annotations

import gc
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from hypothesis import given, settings
from hypothesis import strategies as st

from hocket.launch import RankError, RankExpectationError, RankPool, RankTimeout, spawn
from hocket.launch.selfcheck import rank_identity
from hocket.launch.same_case import case_digest, check_same_case, rank_generator, shared_generator

# -- functions run inside the ranks (module level: they travel by name) -----------------


def rank_sum(offset: float) -> tuple[int, int, float, int]:
    t = torch.tensor([dist.get_rank() + offset], dtype=torch.float64)
    dist.all_reduce(t)
    return dist.get_rank(), dist.get_world_size(), float(t.item()), os.getpid()


def echo_case(case: dict) -> tuple[str, float]:
    check_same_case(case)
    return case_digest(case), float(case["tensor"].sum())


def draw_tensors(seed: int) -> tuple[list[float], list[float]]:
    mine = torch.randn(4, generator=rank_generator(seed), dtype=torch.float64)
    shared = torch.randn(4, generator=shared_generator(seed), dtype=torch.float64)
    return mine.tolist(), shared.tolist()


def raise_on(bad_rank: int, message: str) -> str:
    if dist.get_rank() == bad_rank:
        raise ValueError(message)
    return "fine"


def raise_everywhere(message: str) -> None:
    dist.barrier()  # the failure comes after a collective, like an agreement check
    raise ValueError(f"{message} on rank {dist.get_rank()}")


def raise_type_by_rank() -> None:
    if dist.get_rank() == 0:
        raise ValueError("value")
    raise KeyError("key")


def raise_then_others_block(bad_rank: int) -> None:
    if dist.get_rank() == bad_rank:
        raise RuntimeError("left the others waiting")
    dist.barrier()


def collective_on_rank0_only() -> str:
    if dist.get_rank() == 0:
        dist.barrier()
    return "done"


def sleep_s(seconds: float) -> str:
    time.sleep(seconds)
    return "slept"


def exit_on(bad_rank: int, code: int) -> str:
    if dist.get_rank() == bad_rank:
        os._exit(code)
    return "alive"


def unpicklable_result() -> object:
    return lambda: None


def thread_settings() -> tuple[int, str | None, str | None, str]:
    return torch.get_num_threads(), os.environ.get("OMP_NUM_THREADS"), os.environ.get("HOCKET_TEST_MARKER"), os.getcwd()


def spawned_sum(rank: int, world_size: int, offset: float) -> tuple[int, int, float, int]:
    t = torch.tensor([rank + offset], dtype=torch.float64)
    dist.all_reduce(t)
    return rank, world_size, float(t.item()), torch.get_num_threads()


def spawned_raise_on_1(rank: int, world_size: int) -> None:
    if rank == 1:
        raise ZeroDivisionError("rank one divided by zero")
    dist.barrier()


def spawned_sleep(rank: int, world_size: int, seconds: float) -> None:
    time.sleep(seconds)


# -- helpers -----------------------------------------------------------------------------


def assert_gone(pids: list[int]) -> None:
    """Every pid is reaped: no such process any more (or the pid was reused by a non-child)."""
    children = {p.pid for p in multiprocessing.active_children()}
    assert not children & set(pids), f"rank processes still children of the driver: {children & set(pids)}"
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        with open(f"/proc/{pid}/stat") as fh:  # the pid exists again: it must not be our rank
            assert str(os.getpid()) not in fh.read().split()[3:4], f"pid {pid} is still a child of the driver"


def child_pids() -> set[int]:
    return {p.pid for p in multiprocessing.active_children() if p.pid is not None}


# -- RankPool ----------------------------------------------------------------------------


@settings(max_examples=5)
@given(offset=st.floats(-1e6, 1e6, allow_nan=False))
def test_results_come_back_by_rank(pool: RankPool, offset: float) -> None:
    results = pool.run(rank_sum, offset)
    world = pool.world_size
    expected_sum = world * offset + world * (world - 1) / 2
    assert [r[0] for r in results] == list(range(world))
    assert all(r[1] == world for r in results)
    assert all(r[2] == pytest.approx(expected_sum, rel=1e-12, abs=1e-9) for r in results)
    assert len({r[3] for r in results}) == world and os.getpid() not in {r[3] for r in results}


@settings(max_examples=5)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 64))
def test_every_rank_gets_the_drivers_case(pool2: RankPool, seed: int, n: int) -> None:
    case = {"seed": seed, "tensor": torch.randn(n, generator=torch.Generator().manual_seed(seed))}
    results = pool2.run(echo_case, case)
    assert {digest for digest, _ in results} == {case_digest(case)}
    assert all(total == pytest.approx(float(case["tensor"].sum())) for _, total in results)


def test_rank_generators_differ_by_rank_and_shared_ones_agree(pool4: RankPool) -> None:
    seed = int(torch.randint(0, 2**31 - 1, ()).item())
    results = pool4.run(draw_tensors, seed)
    mine = [tuple(m) for m, _ in results]
    shared = [tuple(s) for _, s in results]
    assert len(set(mine)) == 4 and len(set(shared)) == 1
    assert pool4.run(draw_tensors, seed) == results  # reproducible from the driver's seed


def test_exception_on_one_rank_names_that_rank(pool: RankPool) -> None:
    bad = pool.world_size - 1
    message = f"bad input {torch.randint(0, 10**6, ()).item()}"
    with pytest.raises(RankError) as info:
        pool.run(raise_on, bad, message)
    err = info.value
    assert err.failed_ranks == (bad,)
    assert err.failures[bad].exc_type == "ValueError" and err.failures[bad].message == message
    assert "raise_on" in err.failures[bad].traceback_text
    assert f"rank {bad}: ValueError: {message}" in str(err)
    assert pool.run(raise_on, -1, "nobody") == ["fine"] * pool.world_size


def test_stuck_ranks_after_a_failure_are_reported_and_pool_recovers(pool2: RankPool) -> None:
    generation = pool2.generation
    with pytest.raises(RankError) as info:
        pool2.run(raise_then_others_block, 1)
    assert not isinstance(info.value, RankTimeout)
    assert info.value.failed_ranks == (1,) and info.value.unfinished == (0,)
    assert "barrier" in info.value.stacks.get(0, "barrier")  # stack of the stuck rank, when the OS gives one
    assert pool2.generation == generation + 1
    assert [r[0] for r in pool2.run(rank_sum, 0.5)] == [0, 1]


def test_expect_error_on_all_ranks(pool: RankPool) -> None:
    failures = pool.run_expect_error(raise_everywhere, "broken", exc_type=ValueError, match=r"broken on rank \d")
    assert [f.rank for f in failures] == list(range(pool.world_size))
    assert all(f.message == f"broken on rank {f.rank}" for f in failures)


def test_expect_error_rejects_partial_or_wrong_failures(pool2: RankPool) -> None:
    with pytest.raises(RankExpectationError, match="rank 0 did not raise"):
        pool2.run_expect_error(raise_on, 1, "only one", exc_type=ValueError)
    with pytest.raises(RankExpectationError, match="rank 1 raised KeyError, not ValueError"):
        pool2.run_expect_error(raise_type_by_rank, exc_type=ValueError)
    with pytest.raises(RankExpectationError, match="does not match"):
        pool2.run_expect_error(raise_everywhere, "broken", exc_type=ValueError, match="^unrelated")
    with pytest.raises(RankExpectationError, match="every rank returned"):
        pool2.run_expect_error(raise_on, -1, "nobody", exc_type=ValueError)
    assert pool2.run(raise_on, -1, "x") == ["fine", "fine"]


def test_deadlock_raises_rank_timeout_and_pool_restarts(pool: RankPool) -> None:
    old_pids = pool.pids
    generation = pool.generation
    timeout_s = 2.0
    start = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        pool.run(collective_on_rank0_only, timeout_s=timeout_s)
    elapsed_s = time.monotonic() - start
    assert info.value.timeout_s == timeout_s
    assert info.value.unfinished == (0,)  # the others returned: only rank 0 waits in the barrier
    assert elapsed_s < timeout_s + 30  # bounded: the driver never waits for the hung collective
    assert pool.generation == generation + 1
    assert_gone(old_pids)
    results = pool.run(rank_sum, 1.0)
    assert [r[0] for r in results] == list(range(pool.world_size))
    assert not set(old_pids) & {r[3] for r in results}


def test_collective_timeout_fails_inside_the_rank() -> None:
    with RankPool(2, timeout_s=60, collective_timeout_s=1.0) as pool:
        with pytest.raises(RankError) as info:
            pool.run(collective_on_rank0_only)
        assert not isinstance(info.value, RankTimeout)
        assert info.value.failed_ranks == (0,)  # its barrier gave up by itself, well before the task bound
        assert "barrier" in info.value.failures[0].traceback_text
        assert pool.run(raise_on, -1, "x") == ["fine", "fine"]


def test_dead_rank_is_reported_and_replaced(pool2: RankPool) -> None:
    old_pids = pool2.pids
    with pytest.raises(RankError) as info:
        pool2.run(exit_on, 0, 7)
    assert 0 in info.value.failures and "exited with code 7" in info.value.failures[0].message
    assert_gone(old_pids)
    assert pool2.run(exit_on, -1, 0) == ["alive", "alive"]


def test_unpicklable_result_is_a_rank_error(pool2: RankPool) -> None:
    with pytest.raises(RankError, match="could not be pickled"):
        pool2.run(unpicklable_result)
    assert pool2.run(raise_on, -1, "x") == ["fine", "fine"]


def test_interrupted_run_restarts_the_pool(pool2: RankPool) -> None:
    class Interrupted(Exception):
        pass

    def interrupt(signum: int, frame: object) -> None:
        raise Interrupted

    generation = pool2.generation
    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.5)
        with pytest.raises(Interrupted):
            pool2.run(sleep_s, 30.0)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert pool2.generation == generation + 1
    assert pool2.run(sleep_s, 0.0) == ["slept", "slept"]


def test_bad_arguments_are_refused_before_anything_runs(pool2: RankPool) -> None:
    with pytest.raises(TypeError, match="module level"):
        pool2.run(lambda: None)
    with pytest.raises(ValueError, match="timeout_s"):
        pool2.run(rank_sum, 0.0, timeout_s=0)
    with pytest.raises(TypeError, match="world_size"):
        RankPool("2")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="world_size=0"):
        RankPool(0)
    with pytest.raises(ValueError, match="backend"):
        RankPool(2, backend="mpi")
    in_main = types.FunctionType(rank_sum.__code__, {}, "rank_sum")
    in_main.__module__ = "__main__"
    with pytest.raises(TypeError, match="defined in __main__"):
        pool2.run(in_main, 0.0)


def test_close_leaves_no_process_and_threads_env_and_cwd_reach_ranks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    marker = str(torch.randint(0, 10**9, ()).item())
    monkeypatch.setenv("HOCKET_TEST_MARKER", marker)
    monkeypatch.chdir(tmp_path)
    with RankPool(2, threads_per_rank=1, timeout_s=30) as pool:
        pids = pool.pids
        assert pool.run(thread_settings) == [(1, "1", marker, str(tmp_path))] * 2
    assert_gone(pids)
    pool.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        pool.run(thread_settings)


def test_forgotten_pool_is_reaped_by_its_finalizer() -> None:
    pool = RankPool(2, timeout_s=30)
    pids = pool.pids
    del pool
    gc.collect()
    assert_gone(pids)


# -- spawn -------------------------------------------------------------------------------


@pytest.mark.parametrize("start_method", ["forkserver", "spawn"])
def test_spawn_returns_results_by_rank(start_method: str) -> None:
    before = child_pids()  # the session's pools may be running
    results = spawn(rank_identity, world_size=2, start_method=start_method, timeout_s=120)
    threads = max(1, len(os.sched_getaffinity(0)) // 2)
    assert results == [(0, 2, 3.0, threads), (1, 2, 3.0, threads)]
    offset = float(torch.rand(()).item())
    results = spawn(spawned_sum, world_size=2, args=(offset,), start_method="forkserver", threads_per_rank=1)
    assert [r[:2] for r in results] == [(0, 2), (1, 2)]
    assert all(r[2] == pytest.approx(2 * offset + 1) and r[3] == 1 for r in results)
    assert child_pids() <= before


def test_spawn_exception_names_the_rank_and_kills_the_rest() -> None:
    before = child_pids()  # the session's pools may be running
    with pytest.raises(RankError) as info:
        spawn(spawned_raise_on_1, world_size=2, start_method="forkserver", timeout_s=60, error_grace_s=1.0)
    err = info.value
    assert err.failed_ranks == (1,) and err.failures[1].exc_type == "ZeroDivisionError"
    assert "rank one divided by zero" in str(err) and "spawned_raise_on_1" in err.failures[1].traceback_text
    assert err.unfinished == (0,)
    assert child_pids() <= before


def test_spawn_timeout_kills_every_rank() -> None:
    before = child_pids()  # the session's pools may be running
    spawn(spawned_sum, world_size=1, args=(0.0,), start_method="forkserver")  # forkserver up, module imported
    start = time.monotonic()
    with pytest.raises(RankTimeout) as info:
        spawn(spawned_sleep, world_size=3, args=(120.0,), start_method="forkserver", timeout_s=4.0)
    assert time.monotonic() - start < 4.0 + 30
    assert info.value.unfinished == (0, 1, 2)
    stacks = info.value.stacks
    assert sorted(stacks) == [0, 1, 2] or not stacks  # no stacks only where SIGUSR1 does not exist
    assert all("spawned_sleep" in text or "still starting up" in text for text in stacks.values())
    assert child_pids() <= before


def test_spawn_threads_and_world_of_one() -> None:
    results = spawn(spawned_sum, world_size=1, args=(2.5,), threads_per_rank=1, start_method="forkserver")
    assert results == [(0, 1, 2.5, 1)]
    with pytest.raises(TypeError, match="module level"):
        spawn(lambda rank, world: None, world_size=2)
    with pytest.raises(TypeError, match="args"):
        spawn(spawned_sum, world_size=2, args=[1.0])  # type: ignore[arg-type]


def test_init_torchrun_under_real_torchrun() -> None:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
               "-m", "hocket.launch.selfcheck"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    # the two ranks share one pipe: match the records anywhere, not only at line starts
    found = re.findall(r"selfcheck (rank=\d+) (world=\d+) (local_rank=\d+) (backend=\w+) (device=\w+)", done.stdout)
    lines = sorted(list(m) for m in found)
    assert lines == [
        ["rank=0", "world=2", "local_rank=0", "backend=gloo", "device=cpu"],
        ["rank=1", "world=2", "local_rank=1", "backend=gloo", "device=cpu"],
    ]
    assert all("sum=3 " in line for line in done.stdout.splitlines() if line.startswith("selfcheck"))
