import pytest
import torch

from hocket.timing.timer import TimingConfig, max_across_ranks, time_callable, time_interleaved


def test_time_callable_runs_warmup_then_iters_and_summarises():
    calls = []
    a = torch.randn(64, 64)
    config = TimingConfig(warmup=3, iters=7)

    def work():
        calls.append(1)
        return a @ a

    summary = time_callable(work, config=config)
    assert len(calls) == 10
    assert summary.n == 7
    assert 0.0 <= summary.p10_ms <= summary.median_ms <= summary.p90_ms


def test_without_a_process_group_max_across_ranks_is_identity():
    samples = torch.rand(5).tolist()
    assert max_across_ranks(samples) == samples


@pytest.mark.parametrize("kwargs, name", [({"warmup": -1}, "warmup"), ({"iters": 0}, "iters"),
                                          ({"iters": True}, "iters")])
def test_timing_config_validates(kwargs, name):
    with pytest.raises(ValueError, match=name):
        TimingConfig(**kwargs)


def test_time_callable_rejects_bad_arguments():
    with pytest.raises(TypeError, match="fn"):
        time_callable(42)
    with pytest.raises(ValueError, match="device"):
        time_callable(lambda: None, device="meta")


def test_interleaved_timing_splits_iterations_over_rounds():
    counts = {"a": 0, "b": 0}
    order = []

    def make(name):
        def fn():
            counts[name] += 1
            order.append(name)
        return fn

    result = time_interleaved({"a": make("a"), "b": make("b")}, config=TimingConfig(warmup=1, iters=7), rounds=3)
    assert counts == {"a": 8, "b": 8}
    assert result["a"].n == 7 and result["b"].n == 7
    # rounds alternate: after the warm-ups, a's 3 samples, then b's 3, then a again
    assert order[2:] == ["a"] * 3 + ["b"] * 3 + ["a"] * 2 + ["b"] * 2 + ["a"] * 2 + ["b"] * 2


def test_interleaved_timing_validates():
    with pytest.raises(ValueError, match="rounds"):
        time_interleaved({"a": lambda: None}, rounds=0)
    with pytest.raises(ValueError, match="fns"):
        time_interleaved({})


def test_reps_run_back_to_back_and_each_sample_is_their_mean(monkeypatch):
    calls = []
    clock = iter(float(t) for t in range(10_000))  # every perf_counter() call advances 1 s
    monkeypatch.setattr("hocket.timing.timer.time.perf_counter", lambda: next(clock))

    def work():
        calls.append(1)
        next(clock)  # one tick of "work" per call

    summary = time_callable(work, config=TimingConfig(warmup=2, iters=3, reps=4))
    assert len(calls) == 2 + 3 * 4
    # per sample: start read, 4 calls of one tick each, end read -> 5 s over 4 calls
    assert summary.n == 3
    assert summary.median_ms == pytest.approx(5e3 / 4)


@pytest.mark.parametrize("reps", [0, -2, True, 1.5])
def test_reps_must_be_a_positive_int(reps):
    with pytest.raises(ValueError, match="reps"):
        TimingConfig(reps=reps)
    with pytest.raises(ValueError, match="reps"):
        from hocket.timing.timer import sample_ms
        sample_ms(lambda: None, iters=1, reps=reps)
