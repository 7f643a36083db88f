"""The run-to-run noise floor of committed measurements: the same plan on the same site, timed in
several runs. No cost model can be more accurate than the measurements disagree with each other."""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable


def run_to_run(groups: Iterable, *, implementation: Callable[[object], tuple], same_commit: bool = False) -> dict:
    """For every (site, plan, implementation) measured in at least two runs, each run's deviation
    from the median of its runs (the error of a model that knew the true mean exactly) and the
    max/min spread. ``groups``: objects with ``site`` and ``records`` (results lines);
    ``implementation``: a line -> what names how its plan was implemented (kernel variant, tile
    config, ...), so variants of one plan are not counted as noise. ``same_commit``: only compare
    lines measured at one git hash (across commits the spread holds code changes too)."""
    runs: dict[tuple, list[float]] = {}
    for g in groups:
        for r in g.records:
            variant = implementation(r)
            if same_commit:
                variant += (str(r.git_hash),)
            runs.setdefault((g.site.key, r.plan.describe(), variant), []).append(r.median_ms)
    deviations, spreads = [], []
    for times in runs.values():
        if len(times) < 2:
            continue
        middle = statistics.median(times)
        deviations.extend(abs(t / middle - 1.0) for t in times)
        spreads.append(max(times) / min(times) - 1.0)
    return {"plans": len(spreads), "lines": len(deviations),
            "median_deviation": statistics.median(deviations) if deviations else None,
            "max_deviation": max(deviations) if deviations else None,
            "median_spread": statistics.median(spreads) if spreads else None,
            "max_spread": max(spreads) if spreads else None}


def percent(value) -> str:
    """``12.3%``, or ``n/a`` for None."""
    return "n/a" if value is None else f"{100 * value:.1f}%"


def print_noise(noise: dict, label: str) -> None:
    print(f"run-to-run {label}(same plan, same site, {noise['plans']} plans measured in >= 2 runs, "
          f"{noise['lines']} lines): |deviation from the median of the runs| median "
          f"{percent(noise['median_deviation'])}, max {percent(noise['max_deviation'])}; max/min - 1 median "
          f"{percent(noise['median_spread'])}, max {percent(noise['max_spread'])} (the noise floor: no model can "
          f"beat it)")
