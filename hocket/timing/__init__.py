"""Timing collective calls honestly (docs/validation.md, how a results line is measured): samples behind barriers, the maximum across
ranks, warm-up, CUDA events on GPUs (``timer``); median / p10 / p90 / n (``stats``)."""

from hocket.timing.stats import Summary, summarize
from hocket.timing.timer import TimingConfig, time_callable

__all__ = ["Summary", "TimingConfig", "summarize", "time_callable"]
