"""The host-staged transport's issue thread (order, failures, bounded waits) and its message cuts,
on CPU; the CUDA streams and cross-process events are exercised in tests/gpu."""

import random
import threading

import pytest

from hocket import env
from hocket.transport.issue_thread import IssueThread
from hocket.transport.pending import TransportError
from hocket.transport.per_group import ramped_rounds, rounds

pytestmark = pytest.mark.timeout(60)


def test_jobs_run_on_one_other_thread_in_submission_order():
    issuer = IssueThread("cpu", name="t")
    seen, threads = [], set()
    count = random.randint(5, 40)

    def job(i):
        def run():
            threads.add(threading.get_ident())
            seen.append(i)
        return run

    pendings = [issuer.submit(job(i), what=f"job {i}") for i in range(count)]
    order = list(range(count))
    random.shuffle(order)
    for i in order:  # waiting in any order: each returns once its job ran
        pendings[i].wait()
        assert i in seen and pendings[i].done
    issuer.close()
    assert seen == list(range(count))
    assert threads and threading.get_ident() not in threads and len(threads) == 1


def test_a_failed_job_raises_at_its_wait_and_at_the_next_submit():
    issuer = IssueThread("cpu", name="t")
    failing = issuer.submit(lambda: (_ for _ in ()).throw(TimeoutError("peer never published")), what="bad")
    with pytest.raises(TimeoutError, match="peer never published"):
        failing.wait()
    with pytest.raises(TransportError, match="out of step.*peer never published"):
        issuer.submit(lambda: None, what="next")
    issuer.close()


def test_wait_is_bounded_by_hocket_timeout(monkeypatch):
    monkeypatch.setenv("HOCKET_TIMEOUT_S", "0.2")
    release = threading.Event()
    issuer = IssueThread("cpu", name="slow")
    pending = issuer.submit(lambda: release.wait(30) and None, what="stuck transfer")
    with pytest.raises(TransportError, match="stuck transfer.*HOCKET_TIMEOUT_S"):
        pending.wait()
    release.set()
    issuer.close()
    with pytest.raises(RuntimeError, match="closed"):
        issuer.submit(lambda: None, what="late")


@pytest.mark.parametrize("trial", range(20))
def test_ramped_rounds_cover_every_element_once_and_ramp(trial):
    rng = random.Random(trial * 7919 + random.randint(0, 10**6))
    total, per_round = rng.randint(0, 5000), rng.randint(1, 700)
    cut = ramped_rounds(total, per_round)
    assert cut[0][0] == 0 and cut[-1][1] == total
    assert all(a[1] == b[0] for a, b in zip(cut, cut[1:]))
    sizes = [hi - lo for lo, hi in cut]
    assert max(sizes) <= per_round
    if total > per_round:  # the first two messages are smaller, the rest as before
        assert sizes[0] == max(1, per_round // 4) and sizes[1] == max(1, per_round // 2)
        assert len(cut) <= len(rounds(total, per_round)) + 2
    else:  # what fits one message stays one message
        assert cut == [(0, total)]


def test_piece_size_flag_is_checked(monkeypatch):
    monkeypatch.setenv("HOCKET_HOST_STAGE_PIECE_MB", "2")
    assert env.host_stage_piece_bytes() == 2 * 2**20
    monkeypatch.setenv("HOCKET_HOST_STAGE_PIECE_MB", "0")
    with pytest.raises(ValueError, match="HOCKET_HOST_STAGE_PIECE_MB"):
        env.host_stage_piece_bytes()
