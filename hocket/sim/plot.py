"""PNG timeline of a Timeline (matplotlib, Agg backend; deterministic output).

One row per resource (grouped by owner), one bar per task, coloured by the task's
contention kind (compute, collective, p2p, copy_engine, host_staged, ...). Bars closer
than a pixel are merged, so a whole training step still draws quickly.
"""

from __future__ import annotations

from pathlib import Path

from hocket.sim.engine import Timeline

_PALETTE = ("#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C")
_WIDTH_PX = 1600
_ROW_PX = 18
_MAX_ROWS = 160
_RESOURCE_ORDER = ("compute", "link", "copy_engine", "host")


def _merged_bars(spans: list[tuple[float, float]], min_gap_ms: float) -> list[tuple[float, float]]:
    """(start, width) bars with gaps below ``min_gap_ms`` closed."""
    out: list[tuple[float, float]] = []
    cur_s = cur_e = None
    for s, e in sorted(spans):
        if cur_s is None:
            cur_s, cur_e = s, e
        elif s - cur_e <= min_gap_ms:
            cur_e = max(cur_e, e)
        else:
            out.append((cur_s, cur_e - cur_s))
            cur_s, cur_e = s, e
    if cur_s is not None:
        out.append((cur_s, cur_e - cur_s))
    return out


def plot_timeline(timeline: Timeline, path: str | Path, *, title: str = "hocket simulate") -> Path:
    """Draw ``timeline`` to a PNG at ``path`` and return the path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    out = Path(path)
    if out.parent and not out.parent.exists():
        raise ValueError(f"plot path {str(out)!r}: folder {str(out.parent)!r} does not exist; create it first")
    g = timeline.graph
    kind_rank = {k: i for i, k in enumerate(_RESOURCE_ORDER)}
    # one row per owner and resource group ("pp.send_next" and "pp.recv_prev" share the row "pp")
    row_of_resource = {r: (g.resource_owner[r], g.resource_kind[r].split(".")[0])
                       for r in range(len(g.resource_names))}
    all_rows = sorted(set(row_of_resource.values()),
                      key=lambda row: (row[0], kind_rank.get(row[1], len(kind_rank)), row[1]))
    rows = all_rows[:_MAX_ROWS]
    row_index = {row: i for i, row in enumerate(rows)}
    makespan_ms = max(timeline.makespan_ms, 1e-9)
    min_gap_ms = makespan_ms / _WIDTH_PX
    kinds = sorted(set(g.kinds))
    colour = {k: _PALETTE[i % len(_PALETTE)] for i, k in enumerate(kinds)}

    spans: dict[tuple[int, str], list[tuple[float, float]]] = {}
    for t, res in enumerate(g.resources):
        for r in res:
            i = row_index.get(row_of_resource[r])
            if i is not None:
                spans.setdefault((i, g.kinds[t]), []).append((timeline.start_ms[t], timeline.end_ms[t]))

    labels = [f"{g.owner_names[o]}/{group}" for o, group in rows]
    label_px = 60 + 5 * max((len(x) for x in labels), default=10)
    legend_px = 130
    height_px = max(250, len(rows) * _ROW_PX + 110)
    fig = Figure(figsize=(_WIDTH_PX / 100, height_px / 100), dpi=100)
    FigureCanvasAgg(fig)  # Agg canvas owned by this figure: no pyplot state, no global backend switch
    ax = fig.add_subplot()
    fig.subplots_adjust(left=label_px / _WIDTH_PX, right=1 - legend_px / _WIDTH_PX, top=1 - 40 / height_px,
                        bottom=60 / height_px)
    for (i, kind), items in sorted(spans.items()):
        y = len(rows) - 1 - i
        ax.broken_barh(_merged_bars(items, min_gap_ms), (y - 0.4, 0.8), facecolors=colour[kind], linewidth=0)
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(list(reversed(labels)), fontsize=7)
    ax.set_xlim(0, makespan_ms)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.set_xlabel("time (ms)")
    shown = "" if len(rows) == len(all_rows) else f" (first {len(rows)} of {len(all_rows)} rows)"
    ax.set_title(f"{title}: {makespan_ms:.3f} ms{shown}", fontsize=10)
    ax.legend(handles=[Patch(color=colour[k], label=k) for k in kinds], loc="upper left",
              bbox_to_anchor=(1.0, 1.0), fontsize=7)
    fig.savefig(out, format="png", metadata={"Software": None})
    return out
