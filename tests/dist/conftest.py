"""Multi-process tests: persistent gloo rank pools, and a timeout on every test.

Use ``pool2`` / ``pool4`` (or ``pool``, parametrised over both) as
``pool2.run(check_fn, case)``: ``check_fn`` is a module-level function run on every
rank with the same ``case`` (draw it in the test with hypothesis; inside the rank,
build tensors with ``hocket.launch.same_case.rank_generator(case.seed)``).
``pool.run_expect_error(fn, case, exc_type=ValueError, match=...)`` asserts that every
rank raised. A deadlocked task raises RankTimeout after ``POOL_TASK_TIMEOUT_S`` and the
pool restarts itself, so one bad test does not poison the next.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hocket.launch import RankPool

DIST_DIR = Path(__file__).parent
DIST_TEST_TIMEOUT_S = 240  # whole test, hypothesis examples included
POOL_TASK_TIMEOUT_S = 60  # one pool.run on every rank


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if DIST_DIR not in Path(item.path).parents:
            continue
        item.add_marker(pytest.mark.dist)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(DIST_TEST_TIMEOUT_S))


# Imported once by the forkserver, not again by every (re)started rank that unpickles a test function.
RANK_PRELOAD = ("numpy", "pytest", "hypothesis")


def _pool(world_size: int) -> Iterator[RankPool]:
    with RankPool(
        world_size, backend="gloo", threads_per_rank=1, timeout_s=POOL_TASK_TIMEOUT_S, preload=RANK_PRELOAD
    ) as pool:
        yield pool


@pytest.fixture(scope="session")
def pool2() -> Iterator[RankPool]:
    yield from _pool(2)


@pytest.fixture(scope="session")
def pool4() -> Iterator[RankPool]:
    yield from _pool(4)


@pytest.fixture(scope="session", params=[2, 4], ids=["world2", "world4"])
def pool(request: pytest.FixtureRequest) -> RankPool:
    return request.getfixturevalue(f"pool{request.param}")
