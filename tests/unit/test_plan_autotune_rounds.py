"""The autotuner's extra rounds: while the two plans with the lowest medians have overlapping
quartile ranges, both are timed again (up to ``AutotuneConfig.extra_rounds``), so that noise in the
first samples does not pick the slower one. One process, timing replaced by scripted samples."""

from __future__ import annotations

import random

import pytest

import hocket.timing.timer as timer
from hocket.core.plan import Plan
from hocket.core.site import Site
from hocket.plan.autotune import AutotuneConfig, autotune, decide

SEQ = Plan()
BULK = Plan(strategy="bulk")
CHUNKED = Plan(strategy="chunked", chunks=2)
SITE = Site(kind="ag_mm", m=256, k=64, n=64, world=2, dtype="float32")


class Script:
    """Samples per plan per call of ``interleaved_samples_ms``: the first call's from ``first``, later
    calls' from ``true`` (each value with a small random jitter); records what each call timed."""

    def __init__(self, first: dict[Plan, list[float]], true: dict[Plan, float], seed: int) -> None:
        self.first, self.true, self.rng, self.calls = first, true, random.Random(seed), []

    def __call__(self, fns, *, config, rounds=1, group=None, device="cpu"):
        names = list(fns)
        self.calls.append((names, config.iters, config.warmup))
        by_json = {p.to_json(): p for p in self.true}
        if len(self.calls) == 1:
            return {n: list(self.first[by_json[n]]) for n in names}
        return {n: [self.true[by_json[n]] * self.rng.uniform(0.99, 1.01) for _ in range(config.iters)]
                for n in names}


def _tune(monkeypatch, script: Script, **config) -> Plan:
    monkeypatch.setattr(timer, "interleaved_samples_ms", script)
    cfg = AutotuneConfig(warmup=1, iters=8, rounds=2, **config)
    return autotune(SITE, [SEQ, BULK, CHUNKED], lambda plan: (lambda: None), config=cfg).chosen


def test_overlapping_front_runners_are_timed_again_and_the_faster_one_wins(monkeypatch):
    # first samples: BULK looks best by luck, CHUNKED (truly 15% faster) has two slow samples
    first = {SEQ: [1.6] * 8, BULK: [1.20, 1.22, 1.24, 1.25, 1.26, 1.27, 1.28, 1.30],
             CHUNKED: [1.05, 1.10, 1.15, 1.20, 1.22, 1.40, 1.45, 1.50]}
    script = Script(first, {SEQ: 1.6, BULK: 1.45, CHUNKED: 1.22}, seed=random.randrange(1 << 30))
    assert _tune(monkeypatch, script) == CHUNKED
    names, iters, warmup = script.calls[1]
    assert sorted(names) == sorted([BULK.to_json(), CHUNKED.to_json()])  # only the two front-runners
    assert iters == 4 and warmup == 0  # one round's share of the samples, no second warm-up


def test_without_extra_rounds_the_first_samples_decide(monkeypatch):
    # CHUNKED (truly faster) has a higher median in its first samples, which alone decide here
    first = {SEQ: [1.6] * 8, BULK: [1.20, 1.22, 1.24, 1.25, 1.26, 1.27, 1.28, 1.30],
             CHUNKED: [1.05, 1.10, 1.15, 1.28, 1.30, 1.40, 1.45, 1.50]}
    script = Script(first, {SEQ: 1.6, BULK: 1.45, CHUNKED: 1.22}, seed=1)
    assert _tune(monkeypatch, script, extra_rounds=0) == BULK  # the noisy pick the extra rounds correct
    assert len(script.calls) == 1


def test_a_clear_winner_is_not_timed_again(monkeypatch):
    first = {SEQ: [1.6] * 8, BULK: [1.40, 1.41, 1.42, 1.43, 1.44, 1.45, 1.46, 1.47],
             CHUNKED: [1.10, 1.11, 1.12, 1.13, 1.14, 1.15, 1.16, 1.17]}
    script = Script(first, {SEQ: 1.6, BULK: 1.45, CHUNKED: 1.13}, seed=2)
    assert _tune(monkeypatch, script) == CHUNKED
    assert len(script.calls) == 1


def test_extra_rounds_stop_at_the_limit(monkeypatch):
    # the two front-runners stay indistinguishable: at most extra_rounds more calls
    first = {SEQ: [1.6] * 8, BULK: [1.2 + 0.01 * i for i in range(8)], CHUNKED: [1.2 + 0.01 * i for i in range(8)]}
    script = Script(first, {SEQ: 1.6, BULK: 1.24, CHUNKED: 1.24}, seed=3)
    _tune(monkeypatch, script, extra_rounds=3)
    assert len(script.calls) == 1 + 3


def test_extra_rounds_must_be_a_count():
    with pytest.raises(ValueError, match="extra_rounds"):
        AutotuneConfig(extra_rounds=-1)


def test_decide_takes_a_clear_median_win_and_refuses_what_noise_explains():
    seq, fast = Plan(), Plan(strategy="chunked", chunks=2)
    rng = random.Random()
    base = rng.uniform(1.0, 4.0)

    def spread(center: float, width: float) -> list[float]:
        return [center * (1 + width * (i / 11 - 0.5)) for i in range(12)]

    # 3.1% faster by median, quartiles apart: chosen (the quartiles and the median margin both hold)
    samples = {seq.to_json(): spread(base, 0.02), fast.to_json(): spread(base * 0.969, 0.02)}
    assert decide(samples, [seq, fast], margin=0.03, clear_win=True) == fast
    # the same medians with quartiles that overlap: the noise may explain it
    samples = {seq.to_json(): spread(base, 0.2), fast.to_json(): spread(base * 0.969, 0.2)}
    assert decide(samples, [seq, fast], margin=0.03, clear_win=True) == seq
    assert decide(samples, [seq, fast], margin=0.03, clear_win=False) == fast
    # quartiles apart but under the margin: kept sequential
    samples = {seq.to_json(): spread(base, 0.005), fast.to_json(): spread(base * 0.98, 0.005)}
    assert decide(samples, [seq, fast], margin=0.03, clear_win=True) == seq
