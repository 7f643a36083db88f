"""A peer that never makes its call: the copy-engine protocols' device-side barrier is bounded
(HOCKET_TIMEOUT_S), so the waiting rank ends in an error within that bound, never a hang.

The barrier's timeout traps the waiting kernel, which leaves that process's CUDA context unusable
(as NCCL's watchdog abort does): each protocol gets a fresh pool, and a rank process that dies of
the trap counts as an error too. Run on a machine with >= 2 GPUs."""

from __future__ import annotations

import os
import time

import pytest
import torch

if not torch.cuda.is_available() or torch.cuda.device_count() < 2:
    pytest.skip("needs >= 2 CUDA GPUs", allow_module_level=True)
if os.environ.get("TRITON_INTERPRET", "") not in ("", "0"):
    pytest.skip("TRITON_INTERPRET is set: run GPU tests in their own process", allow_module_level=True)

import torch.distributed as dist  # noqa: E402

import hocket.ops as H  # noqa: E402
from hocket.launch import RankError, RankPool  # noqa: E402

pytestmark = pytest.mark.timeout(300)
TIMEOUT_S = 3.0


def rank0_calls_alone(plan: dict, env: dict, *, then=None, alive_check: bool = False):
    """Both ranks make one call (the transport's collective set-up) under ``env``, then only rank 0
    calls again (and ``then()``); rank 0 returns ("error" | "returned", seconds, message)."""
    os.environ.update(env)
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(256, 64, device=device, dtype=torch.bfloat16)
    b = torch.randn(64, 128, device=device, dtype=torch.bfloat16)
    H.all_gather_matmul(a, [b], 0, dist.group.WORLD, plan=plan)
    torch.cuda.synchronize()
    dist.barrier()
    if dist.get_rank() == 1:
        return "skipped"
    os.environ["HOCKET_TIMEOUT_S"] = str(TIMEOUT_S)
    start = time.monotonic()
    try:
        H.all_gather_matmul(a, [b], 0, dist.group.WORLD, plan=plan)
        torch.cuda.synchronize()
        if then is not None:
            then()
    except (RuntimeError, TimeoutError) as exc:  # relay/host signals: the handshake's SharedBufferTimeout
        alive = f" (context alive: {float(torch.ones(4, device=device).sum().item()) == 4.0})" if alive_check else ""
        return ("error", time.monotonic() - start, str(exc)[:300] + alive)
    return ("returned", time.monotonic() - start, "")


def call_without_peer(protocol: str):
    return rank0_calls_alone({"strategy": "chunked", "transport": "copy_engine", "chunks": 1,
                              "protocol": protocol}, {})


def assert_bounded_without_peer(fn, protocol: str, what: str) -> None:
    """Run ``fn(protocol)`` on two ranks: rank 0 must end in an error within the bound (or its process
    die of the barrier's trap), rank 1 skips; the pool must come back in time."""
    start = time.monotonic()
    with RankPool(2, backend="nccl", timeout_s=90, start_method="spawn") as pool:
        try:
            results = pool.run(fn, protocol, timeout_s=90)
        except RankError as err:  # rank 0's process died of the trap: bounded all the same
            assert set(err.failures) == {0}, f"only the waiting rank may fail: {err}"
            results = None
    assert time.monotonic() - start < 150, "the pool did not come back in time"
    if results is not None:
        assert results[1] == "skipped"
        outcome, seconds, message = results[0]
        assert outcome == "error", f"rank 0 returned from a {what} whose peer never came ({seconds:.1f} s)"
        assert seconds < 60, f"the error took {seconds:.1f} s (bound: HOCKET_TIMEOUT_S={TIMEOUT_S})"
        print(f"\n{what}/{protocol}: rank 0 failed after {seconds:.1f} s: {message}")


@pytest.mark.parametrize("protocol", ["put", "pull", "push"])
def test_a_missing_peer_ends_in_an_error_within_the_timeout(protocol):
    assert_bounded_without_peer(call_without_peer, protocol, "call")


def relay_call_without_peer():
    """The host-staged relay when a peer never makes its call: rank 0's streams wait in the GPU's front
    end; its watchdog releases them after HOCKET_TIMEOUT_S and the relay raises at its next use (here:
    close). The CUDA context stays usable (no trap). The timeout is set before the first call: the relay
    reads it when it is built."""
    from hocket.transport.host_relay import close_relays

    return rank0_calls_alone({"strategy": "chunked", "transport": "host_staged", "chunks": 2},
                             {"HOCKET_TIMEOUT_S": str(TIMEOUT_S)}, then=close_relays, alive_check=True)


def test_a_missing_relay_peer_ends_in_an_error_within_the_timeout():
    with RankPool(2, backend="nccl", timeout_s=90, start_method="spawn") as pool:
        results = pool.run(relay_call_without_peer, timeout_s=90)
    assert results[1] == "skipped"
    outcome, seconds, message = results[0]
    assert outcome == "error", f"rank 0 returned from a relay call whose peer never came ({seconds:.1f} s)"
    assert seconds < 60, f"the error took {seconds:.1f} s (bound: HOCKET_TIMEOUT_S={TIMEOUT_S})"
    assert "context alive: True" in message, message
    print(f"\nrelay: rank 0 failed after {seconds:.1f} s: {message}")


def rank0_replays_alone(plan: dict, env: dict, *, then=None, alive_check: bool = False, sizes=None):
    """Both ranks capture one call of ``plan`` in a CUDA graph under ``env`` (HOCKET_TIMEOUT_S set first:
    a capture keeps the timeout it saw) and the transport ``sizes`` (a TransportSizes, None: the defaults),
    then only rank 0 replays it (and ``then()``); rank 0 returns ("error" | "returned", seconds, message)."""
    from hocket.core.sizes import set_sizes
    from hocket.ops import CapturedCall

    os.environ.update(env)
    set_sizes(sizes)
    device = torch.device("cuda", torch.cuda.current_device())
    a = torch.randn(256, 64, device=device, dtype=torch.bfloat16)
    b = torch.randn(64, 128, device=device, dtype=torch.bfloat16)
    step = CapturedCall(lambda x, y: H.all_gather_matmul(x, [y], 0, dist.group.WORLD, plan=plan)[1][0], a, b)
    torch.cuda.synchronize()
    dist.barrier()
    if dist.get_rank() == 1:
        return "skipped"
    start = time.monotonic()
    try:
        step(a, b)
        torch.cuda.synchronize()
        if then is not None:
            then()
    except (RuntimeError, TimeoutError) as exc:
        alive = f" (context alive: {float(torch.ones(4, device=device).sum().item()) == 4.0})" if alive_check else ""
        return ("error", time.monotonic() - start, str(exc)[:300] + alive)
    return ("returned", time.monotonic() - start, "")


def relay_replay_without_peer() -> tuple:
    """A relay call captured in a CUDA graph (small messages: the replay reuses every slot several
    times) whose peer never replays it: the replay is handed to the relay's watchdog, which keeps
    every wait released until the replay has ended, and the relay raises at its next use (close)."""
    from hocket.core.sizes import TransportSizes
    from hocket.transport.host_relay import close_relays

    return rank0_replays_alone({"strategy": "chunked", "transport": "host_staged", "chunks": 2, "order": "local_first"},
                               {"HOCKET_TIMEOUT_S": str(TIMEOUT_S)}, then=close_relays, alive_check=True,
                               sizes=TransportSizes(piece_bytes=10485))  # 0.01 MiB messages


def test_a_replay_whose_relay_peer_never_replays_ends_in_an_error():
    with RankPool(2, backend="nccl", timeout_s=90, start_method="spawn") as pool:
        results = pool.run(relay_replay_without_peer, timeout_s=90)
    assert results[1] == "skipped"
    outcome, seconds, message = results[0]
    assert outcome == "error", f"rank 0 returned from a replay whose peer never came ({seconds:.1f} s)"
    assert seconds < 60 and "context alive: True" in message, (seconds, message)
    print(f"\nrelay replay: rank 0 failed after {seconds:.1f} s: {message}")


def copy_engine_replay_without_peer(protocol: str) -> tuple:
    """A copy-engine call captured in a CUDA graph (a barrier protocol) whose peer never replays it: the
    replayed barrier kernel carries the timeout it was captured with."""
    return rank0_replays_alone({"strategy": "chunked", "transport": "copy_engine", "chunks": 1,
                                "protocol": protocol}, {"HOCKET_TIMEOUT_S": str(TIMEOUT_S)})


@pytest.mark.parametrize("protocol", ["put", "pull"])
def test_a_copy_engine_replay_whose_peer_never_replays_ends_in_an_error(protocol):
    assert_bounded_without_peer(copy_engine_replay_without_peer, protocol, "copy-engine replay")
