"""Show and save a run: the rich table on screen, results lines to a file (reporter only)."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from hocket.bench.provenance import collect
from hocket.bench.record import records_from_outcome, write_records
from hocket.bench.session import RunResult
from hocket.bench.table import results_table

TABLE_WIDTH = 200
"""columns used when printing to a pipe or file (rich would otherwise assume 80)."""


def hardware_fingerprint() -> dict:
    """This machine's fingerprint (hocket.hardware), as recorded in every results line."""
    from hocket.hardware import fingerprint

    return fingerprint()


def hidden_text(hidden_fraction: float, transport: str) -> str:
    """How much of the shorter of compute-alone and comm-alone the plan hid; a negative share means
    it ran slower than the two back to back, so its gain over sequential came from the transport."""
    if hidden_fraction > 1:  # faster than the longer of the two alone: noise, or a transport faster than the baseline's
        return f"hides all of the shorter of compute-alone and comm-alone ({transport}) and beats the longer (noise?)"
    if hidden_fraction >= 0:
        return f"hides {hidden_fraction:.2f} of the shorter of compute-alone and comm-alone ({transport})"
    return (f"hides nothing: slower than compute-alone + comm-alone ({transport}) back to back; its gain over "
            f"sequential is the faster transport")


def summary_lines(result: RunResult) -> list[str]:
    """One line per site: its fastest plan and that plan's score."""
    lines = []
    for outcome in result.outcomes:
        site, best = outcome.site, outcome.best()
        if best is None:
            lines.append(f"{site.kind} {site.m}×{site.k}×{site.n}: no plan passed its check")
            continue
        if best.plan.strategy == "sequential":
            lines.append(f"{site.kind} {site.m}×{site.k}×{site.n} {site.dtype}: no plan beat sequential "
                         f"({best.timing.median_ms:.2f} ms)")
            continue
        score = outcome.score(best)
        metric = "—" if score is None else f"{score.metric.replace('_', ' ')} {score.label()}; " + hidden_text(
            score.hidden_fraction, outcome.comm_transport)
        lines.append(f"{site.kind} {site.m}×{site.k}×{site.n} {site.dtype}: best {best.plan.describe()} "
                     f"{best.timing.median_ms:.2f} ms ({metric})")
    return lines


def report(result: RunResult, *, title: str, command: str, out: str | Path | None = None,
           console: Console | None = None) -> int:
    """Print the table (and write ``out``) on the reporter; exit code 1 if any check failed."""
    failed = [p for o in result.outcomes for p in o.plans if not p.passed]
    if not result.is_reporter:
        return 1 if failed else 0
    if console is None:
        console = Console()
        if not console.is_terminal:  # a pipe or file: keep every column whole
            console = Console(width=max(console.width, TABLE_WIDTH))
    info = result.run_info()
    console.print(results_table(result.outcomes, title=f"{title} — {info['backend']}, world {info['world_size']}, "
                                                        f"{info['threads_per_rank']} thread(s)/rank"))
    for line in summary_lines(result):
        console.print(line)
    if out is not None:
        provenance = collect(command=command, hardware=hardware_fingerprint(), extra=info)
        records = [r for o in result.outcomes if o.sequential is not None for r in records_from_outcome(o, provenance)]
        path = write_records(out, records)
        console.print(f"wrote {len(records)} results line(s) to {path}")
    if failed:
        console.print(f"[red]{len(failed)} plan(s) failed their check against the reference[/red]")
        return 1
    return 0
