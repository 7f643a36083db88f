import random

import numpy as np
import pytest

from hocket.bench.efficiency import MIN_SAVING_FRACTION, overlap_score
from hocket.timing.stats import summarize


def test_summary_matches_numpy_percentiles_on_random_samples():
    samples = [random.uniform(0.5, 50.0) for _ in range(random.randint(5, 40))]
    s = summarize(samples)
    assert s.n == len(samples)
    assert s.median_ms == pytest.approx(float(np.median(samples)))
    assert s.p10_ms == pytest.approx(float(np.percentile(samples, 10)))
    assert s.p10_ms <= s.median_ms <= s.p90_ms
    assert min(samples) <= s.p10_ms and s.p90_ms <= max(samples)


@pytest.mark.parametrize("bad", [[], [1.0, float("nan")], [-1.0, 2.0], [[1.0, 2.0]]])
def test_summary_rejects_bad_samples(bad):
    with pytest.raises(ValueError, match="samples_ms"):
        summarize(bad)


def test_efficiency_follows_the_definition():
    compute, comm = random.uniform(50, 100), random.uniform(40, 90)
    sequential = compute + comm
    measured = random.uniform(max(compute, comm), sequential)
    score = overlap_score(measured_ms=measured, sequential_ms=sequential, compute_alone_ms=compute,
                          comm_alone_ms=comm)
    ideal = max(compute, comm)
    assert score.metric == "overlap_efficiency"
    assert score.overlap_efficiency == pytest.approx((sequential - measured) / (sequential - ideal))
    assert 0.0 <= score.overlap_efficiency <= 1.0
    assert score.speedup == pytest.approx(sequential / measured)
    assert score.value == score.overlap_efficiency
    assert score.hidden_fraction == pytest.approx((compute + comm - measured) / min(compute, comm))


def test_beating_a_slow_sequential_by_a_faster_transport_hides_nothing():
    # sequential ran a slow collective (100 ms); the fastest transport needs 20 ms, and a
    # plan that runs compute then the fast transport back to back is "efficient" vs sequential
    compute, fast_comm = random.uniform(200, 400), 20.0
    score = overlap_score(measured_ms=compute + fast_comm, sequential_ms=compute + 100.0,
                          compute_alone_ms=compute, comm_alone_ms=fast_comm)
    assert score.overlap_efficiency == pytest.approx(0.8)
    assert score.hidden_fraction == pytest.approx(0.0)


def test_perfect_overlap_is_one_and_a_loss_is_negative():
    perfect = overlap_score(measured_ms=60.0, sequential_ms=100.0, compute_alone_ms=60.0, comm_alone_ms=40.0)
    assert perfect.overlap_efficiency == pytest.approx(1.0)
    loss = overlap_score(measured_ms=120.0, sequential_ms=100.0, compute_alone_ms=60.0, comm_alone_ms=40.0)
    assert loss.overlap_efficiency < 0.0


def test_small_possible_saving_reports_speedup_instead():
    # comm is 10% of sequential: the most overlap can save is under the 15% rule
    compute = random.uniform(80, 120)
    comm = compute * 0.1
    score = overlap_score(measured_ms=compute * 1.05, sequential_ms=compute + comm, compute_alone_ms=compute,
                          comm_alone_ms=comm)
    assert score.saving_fraction < MIN_SAVING_FRACTION
    assert score.metric == "speedup"
    assert score.value == pytest.approx((compute + comm) / (compute * 1.05))
    assert score.label().endswith("x")


@pytest.mark.parametrize("name", ["measured_ms", "sequential_ms", "compute_alone_ms", "comm_alone_ms"])
def test_efficiency_rejects_non_positive_times(name):
    args = dict(measured_ms=1.0, sequential_ms=2.0, compute_alone_ms=1.0, comm_alone_ms=1.0)
    args[name] = 0.0
    with pytest.raises(ValueError, match=name):
        overlap_score(**args)
