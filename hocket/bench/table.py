"""Rich tables of measured sites: what `hocket bench` and `hocket demo` print."""

from __future__ import annotations

from collections.abc import Iterable

from rich.table import Table

from hocket.bench.outcome import SiteOutcome

COLUMNS = ("op", "m×k×n", "dtype", "strategy", "measured ms", "p10–p90 ms", "sequential ms", "compute-alone ms",
           "comm-alone ms", "overlap eff.", "max error", "check")
TEXT_COLUMNS = ("op", "m×k×n", "dtype", "strategy", "check")


def _ms(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def outcome_rows(outcome: SiteOutcome) -> list[tuple[str, ...]]:
    """Plain-text rows, one per plan (also used by tests)."""
    site = outcome.site
    sequential = outcome.sequential
    best = outcome.best()
    rows = []
    for p in outcome.plans:
        score = outcome.score(p)
        label = p.plan.describe() + (" *" if best is not None and p is best and p.plan.strategy != "sequential" else "")
        spread = "—" if p.timing is None else f"{p.timing.p10_ms:.2f}–{p.timing.p90_ms:.2f}"
        if p.error:
            check = f"error: {p.error[:60]}"
        else:
            check = "ok" if p.passed else f"FAIL (tol {p.tolerance:.1e})"
        rows.append((
            f"{site.kind} {site.name}".rstrip(), f"{site.m}×{site.k}×{site.n}", site.dtype, label,
            _ms(None if p.timing is None else p.timing.median_ms), spread,
            _ms(None if sequential is None else sequential.timing.median_ms),
            _ms(outcome.compute_alone.median_ms),
            _ms(outcome.comm_alone.median_ms) + ("" if outcome.comm_transport == "collective"
                                                 else f" ({outcome.comm_transport})"),
            "—" if score is None or p.plan.strategy == "sequential" else score.label(),
            f"{p.max_error:.1e}", check,
        ))
    return rows


def results_table(outcomes: Iterable[SiteOutcome], *, title: str) -> Table:
    """One table over several sites; a ``*`` marks each site's fastest plan.

    Overlap efficiency is (T_seq - T) / (T_seq - max(T_compute, T_comm)); where that
    possible saving is under 15% of T_seq the column shows the speedup (``1.05x``).
    """
    table = Table(title=title, caption="* fastest plan of the site; '1.05x' = speedup shown when overlap could "
                                       "save < 15% of sequential", header_style="bold")
    for name in COLUMNS:
        table.add_column(name, justify="left" if name in TEXT_COLUMNS else "right", no_wrap=name != "check",
                         overflow="fold")
    for outcome in outcomes:
        rows = outcome_rows(outcome)
        for i, (row, plan_outcome) in enumerate(zip(rows, outcome.plans)):
            shown = row if i == 0 else ("", "", "", *row[3:6], "", "", "", *row[9:])
            table.add_row(*shown, style=None if plan_outcome.passed else "red", end_section=i == len(rows) - 1)
    return table
