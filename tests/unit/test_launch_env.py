"""torchrun environment detection, backend choice, thread counts: pure functions, no processes."""

from __future__ import annotations

import random

import pytest
import torch

from hocket.launch import choose_backend, default_threads_per_rank, detect_torchrun, device_for_rank
from hocket.launch.same_case import case_digest


def _torchrun_env(world: int, rank: int, local_world: int) -> dict[str, str]:
    return {
        "RANK": str(rank),
        "WORLD_SIZE": str(world),
        "LOCAL_RANK": str(rank % local_world),
        "LOCAL_WORLD_SIZE": str(local_world),
        "MASTER_ADDR": "10.0.0.7",
        "MASTER_PORT": str(random.randint(1024, 65535)),
    }


def test_no_torchrun_variables_means_not_under_torchrun() -> None:
    assert detect_torchrun({"PATH": "/usr/bin", "HOME": "/root"}) is None


def test_full_torchrun_environment_is_read() -> None:
    local_world = random.randint(1, 8)
    world = local_world * random.randint(1, 4)
    rank = random.randrange(world)
    env = _torchrun_env(world, rank, local_world)
    got = detect_torchrun(env)
    assert got is not None
    assert (got.rank, got.world_size, got.local_rank, got.local_world_size) == (
        rank,
        world,
        rank % local_world,
        local_world,
    )
    assert got.master_addr == "10.0.0.7" and got.master_port == int(env["MASTER_PORT"])


def test_missing_local_variables_default_to_one_host() -> None:
    env = _torchrun_env(4, 3, 4)
    del env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"]
    got = detect_torchrun(env)
    assert got is not None and got.local_rank == 3 and got.local_world_size == 4


@pytest.mark.parametrize("missing", ["WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"])
def test_partial_environment_names_what_is_missing(missing: str) -> None:
    env = _torchrun_env(2, 1, 2)
    del env[missing]
    with pytest.raises(ValueError, match=f"{missing} not set"):
        detect_torchrun(env)


@pytest.mark.parametrize(
    ("name", "value", "match"),
    [
        ("RANK", "two", "RANK='two' is not an integer"),
        ("RANK", "5", r"RANK=5 must be in \[0, WORLD_SIZE=2\)"),
        ("WORLD_SIZE", "0", "WORLD_SIZE=0 must be >= 1"),
        ("LOCAL_RANK", "3", "LOCAL_RANK=3 must be in"),
        ("MASTER_PORT", "70000", "MASTER_PORT=70000 is not a TCP port"),
    ],
)
def test_bad_values_are_named(name: str, value: str, match: str) -> None:
    env = _torchrun_env(2, 1, 2)
    env[name] = value
    with pytest.raises(ValueError, match=match):
        detect_torchrun(env)


def test_backend_choice_without_gpus_is_gloo() -> None:
    if torch.cuda.device_count() >= 1:
        pytest.skip("this machine has a GPU: auto would pick NCCL for ranks that each get one")
    assert choose_backend("auto", local_world_size=2) == "gloo"
    assert choose_backend("gloo", local_world_size=4) == "gloo"
    with pytest.raises(ValueError, match="one CUDA device per local rank"):
        choose_backend("nccl", local_world_size=2)
    with pytest.raises(ValueError, match="backend='mpi' is not one of"):
        choose_backend("mpi", local_world_size=2)
    assert device_for_rank(0, backend="gloo") == torch.device("cpu")


@pytest.mark.parametrize("devices, ranks, expected", [(0, 1, "gloo"), (0, 2, "gloo"), (1, 1, "nccl"), (1, 2, "gloo"),
                                                      (2, 2, "nccl"), (8, 4, "nccl"), (4, 8, "gloo")])
def test_auto_takes_nccl_when_every_local_rank_has_a_gpu(monkeypatch, devices, ranks, expected) -> None:
    """One rank on a one-GPU machine measures the GPU (2xH200-era rule asked for two devices: run45 of session
    22 calibrated the CPU with ``hocket calibrate --world 1`` on an H200); ranks that would share a GPU get gloo."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: devices > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: devices)
    assert choose_backend("auto", local_world_size=ranks) == expected


def test_device_for_rank_needs_a_backend_or_a_group() -> None:
    with pytest.raises(ValueError, match="initialised process group"):
        device_for_rank(0)


def test_threads_split_cores_and_never_reach_zero() -> None:
    one = default_threads_per_rank(1)
    assert one >= 1
    assert default_threads_per_rank(one * 4) == 1
    assert default_threads_per_rank(2) == max(1, one // 2)
    with pytest.raises(ValueError, match="world_size=0"):
        default_threads_per_rank(0)


def test_case_digest_follows_values_not_identity() -> None:
    t = torch.randn(3, 5)
    case = {"seed": random.randint(0, 2**31), "a": t, "shape": (3, 5)}
    same = {"shape": (3, 5), "a": t.clone(), "seed": case["seed"]}
    assert case_digest(case) == case_digest(same)
    changed = dict(same, a=t + 1)
    assert case_digest(changed) != case_digest(case)
    assert case_digest(torch.ones(2, dtype=torch.bfloat16)) != case_digest(torch.ones(2, dtype=torch.float16))
