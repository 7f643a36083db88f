"""`hocket plan`: choose every site's decomposition for a model's training step on a cluster.

Nothing runs: each site of one training step (Megatron-style TP with sequence
parallelism, PP, DP) is planned with the cost model on the described cluster; a plan
other than sequential is chosen only when predicted faster by more than the margin.

  hocket plan --model llama3-70b --cluster h100x8 --tp 8 --seq 8192 --batch 1
  hocket plan --model llama3-405b --cluster h100-16k --tp 8 --pp 16 --dp 128 --seq 8192 --json plan.json
  hocket plan --model qwen3-30b-a3b --cluster h100-8node --tp 2 --pp 2 --dp 16 --ep 8 --seq 4096

``--ep N`` (MoE models: mixtral-8x7b, qwen3-30b-a3b, deepseek-v3) puts each MoE layer's routed experts over
expert-parallel groups of N ranks of one data-parallel group (N divides --dp and the expert count) and plans the
layer's all-to-all sites (dispatch + grouped GEMM, grouped GEMM + combine, forward and backward) beside the
tensor-parallel ones; without it (or with --ep 1) every rank holds every expert and no all-to-all is planned.

The table shows each site (merged across pipeline stages when identical), its per-rank
shapes (m k n, DESIGN.md's convention), the chosen plan, predicted sequential and
chosen ms per occurrence and the saving; then totals per layer and per step.
``--json`` writes the report that ``hocket simulate`` reads.

``--search`` chooses the parallel configuration instead of taking --tp/--pp/--dp (hocket.search,
docs/parallel-search.md): tp, cp, pp, dp, micro-batches, 1F1B or interleaved, sharding and
recomputation, device groups on mixed clusters, and the expert-parallel degree of MoE models; it prints
the ranked table and the winner's torchtitan and Megatron-LM settings, and --json writes the winner's plan
plus a "search" section.

  hocket plan --search --model llama3-70b --cluster h100-8node --seq 8192 --global-batch 512 --top 5
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from hocket.cli import _shards
from hocket.cli._clusters import add_cluster_arguments
from hocket.cli._ranks import positive_int

__all__ = ["build", "build_search", "check_tokens", "register", "render", "run"]


def check_tokens(tp: int, seq: int, batch: int) -> None:
    """:func:`hocket.models.step.check_tokens` (imported when called: the CLI loads no model code up front)."""
    from hocket.models.step import check_tokens as check

    check(tp, seq, batch)


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a fraction such as 0.03") from None
    if not 0.0 <= value < 1.0:
        raise argparse.ArgumentTypeError(f"{text} must be a fraction in [0, 1), e.g. 0.03 for 3%")
    return value


def _stages(text: str) -> object:
    if text == "auto":
        return "auto"
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--stages {text!r}: give 'auto' or layers per stage, e.g. 8,8,7") from None


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "plan", help="choose every site's decomposition for a model step on a cluster (predicted)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="model preset (e.g. llama3-70b) or a config.json path")
    add_cluster_arguments(parser, required=True)
    parser.add_argument("--tp", type=positive_int, default=None,
                        help="tensor-parallel degree (required unless --search)")
    parser.add_argument("--pp", type=positive_int, default=None, help="pipeline-parallel degree (default 1)")
    parser.add_argument("--dp", type=positive_int, default=None, help="data-parallel degree (default 1)")
    parser.add_argument("--ep", type=positive_int, default=None,
                        help="expert-parallel degree of an MoE model (divides --dp and the experts; default 1)")
    parser.add_argument("--moe-zipf", type=float, default=0.0, metavar="S",
                        help="MoE routing skew: Zipf exponent of the experts' popularity (default 0: uniform)")
    parser.add_argument("--seq", type=positive_int, required=True, help="sequence length in tokens")
    parser.add_argument("--batch", type=positive_int, default=1, help="sequences per micro-batch (default 1)")
    parser.add_argument("--micro-batches", type=positive_int, default=None,
                        help="micro-batches per step and DP replica (default: pp)")
    parser.add_argument("--stages", type=_stages, default=None,
                        help="layers per pipeline stage, e.g. 8,8,7 (default: balanced by device speed)")
    parser.add_argument("--dtype", default="bf16", help="bf16, fp16, fp32, fp8 (default bf16)")
    parser.add_argument("--profile", default=None, help="calibration profile JSON of that cluster")
    parser.add_argument("--margin", type=_fraction, default=0.03,
                        help="saving over sequential a plan needs to be chosen (default 0.03)")
    parser.add_argument("--exhaustive", action="store_true", help="price every candidate (slower)")
    _shards.add_shards_argument(parser)
    search = parser.add_argument_group("parallel search (--search; excludes --tp/--pp/--dp/--ep)")
    search.add_argument("--search", action="store_true",
                        help="choose tp/cp/pp/dp/ep, schedule, micro-batches, sharding, recomputation, device groups")
    search.add_argument("--global-batch", type=positive_int, default=None, metavar="SEQUENCES",
                        help="sequences per step (default: 4M tokens' worth)")
    search.add_argument("--top", type=positive_int, default=5, help="rows of the ranked table (default 5)")
    search.add_argument("--rerank", type=int, default=3,
                        help="best candidates re-ranked by the event simulator (default 3)")
    parser.add_argument("--json", dest="json_out", default=None, metavar="OUT.json",
                        help="write the report as JSON ('-' for stdout instead of the table)")
    parser.set_defaults(func=run)


def build_search(args) -> tuple[dict, str]:
    """``--search``: (JSON report, table text)."""
    from hocket.hardware import load_cluster
    from hocket.search import search_parallel
    from hocket.search.report import format_table, to_json, winner_plan

    given = [flag for flag, value in (("--tp", args.tp), ("--pp", args.pp), ("--dp", args.dp), ("--ep", args.ep))
             if value is not None]
    if given:
        raise ValueError(f"--search chooses the parallel degrees: leave out {' '.join(given)}")
    if args.rerank < 0:
        raise ValueError(f"--rerank {args.rerank} must be >= 0")
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    outcome = search_parallel(args.model, load_cluster(args.cluster), seq=args.seq, global_batch=args.global_batch,
                              top=args.top, rerank=args.rerank, dtype=args.dtype, profile=profile)
    plan = winner_plan(outcome, profile=profile) if args.json_out else None
    return to_json(outcome, plan=plan), format_table(outcome)


def build(args) -> dict:
    from hocket.hardware import load_cluster
    from hocket.models.catalog import load_model
    from hocket.models.step import check_degrees
    from hocket.plan.search import SearchConfig
    from hocket.sim.model_plan import plan_model

    if args.tp is None:
        raise ValueError("--tp is required (or --search to choose the degrees)")
    args.pp = 1 if args.pp is None else args.pp
    args.dp = 1 if args.dp is None else args.dp
    args.ep = 1 if args.ep is None else args.ep
    check_degrees(load_model(args.model), args.tp, args.pp, args.dp, args.ep)  # the model's own limits first
    check_tokens(args.tp, args.seq, args.batch)
    cluster = load_cluster(args.cluster)
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        profile = load_profile(args.profile, expected=None)
    report = plan_model(args.model, cluster, tp=args.tp, pp=args.pp, dp=args.dp, seq=args.seq, batch=args.batch,
                        micro_batches=args.micro_batches, dtype=args.dtype, stages=args.stages, profile=profile,
                        config=SearchConfig(margin=args.margin, exhaustive=args.exhaustive), ep=args.ep,
                        moe_zipf=args.moe_zipf)
    if getattr(args, "shards", False):
        report["shards"] = _shards.model_shards(args.model, cluster, tp=args.tp, seq=args.seq, batch=args.batch,
                                                dtype=args.dtype, profile=profile)
    return report


def _stages_label(stages: list[int]) -> str:
    if len(stages) == 1:
        return str(stages[0])
    if stages == list(range(stages[0], stages[-1] + 1)):
        return f"{stages[0]}-{stages[-1]}"
    return ",".join(str(s) for s in stages)


def render(report: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    from hocket.sim.model_plan import summary_rows

    console = Console()
    if not console.is_terminal or console.width < 120:
        console = Console(width=max(console.width, 132))
    par = report["parallel"]
    ep = f" ep={par['ep']}" if par.get("ep", 1) != 1 else ""
    title = (f"{report['model']} on {report['cluster']}: tp={par['tp']} pp={par['pp']} dp={par['dp']}{ep} "
             f"seq={par['seq']} batch={par['batch']} micro-batches={par['micro_batches']} ({report['dtype']})")
    table = Table(title=title, title_justify="left")
    for column, justify in (("stage", "right"), ("site", "left"), ("kind", "left"), ("m k n", "right"),
                            ("x/step", "right"), ("plan", "left"), ("seq ms", "right"), ("chosen ms", "right"),
                            ("saving", "right")):
        table.add_column(column, justify=justify, no_wrap=column in ("site", "m k n", "plan"))
    for row in summary_rows(report):
        seq_ms, chosen_ms = row["predicted_ms"]["sequential"], row["predicted_ms"]["chosen"]
        shape = f"{row['m']} {row['k']} {row['n']}" + (f" x{row['num_b']}" if row["num_b"] > 1 else "")
        table.add_row(_stages_label(row["stages"]), row["name"], row["kind"], shape, str(row["count"]),
                      row["plan_label"], f"{seq_ms:.3f}", f"{chosen_ms:.3f}",
                      f"{(seq_ms - chosen_ms) / seq_ms:.1%}" if seq_ms > 0 else "-")
    console.print(table)
    if report.get("moe_sites"):
        console.print(_moe_table(report, Table))
    layers = Table(title="per stage (per step: sites, compute, both)", title_justify="left")
    for column in ("stage", "layers", "per layer seq ms", "per layer chosen ms", "sites seq ms", "sites chosen ms",
                   "compute ms", "stage seq ms", "stage chosen ms"):
        layers.add_column(column, justify="right")
    for stage in report["per_stage"]:
        layers.add_row(str(stage["stage"]), str(stage["layers"]), f"{stage['per_layer_ms']['sequential']:.3f}",
                       f"{stage['per_layer_ms']['chosen']:.3f}", f"{stage['sites_ms']['sequential']:.2f}",
                       f"{stage['sites_ms']['chosen']:.2f}", f"{stage['compute_ms']['per_step']:.2f}",
                       f"{stage['step_ms']['sequential']:.2f}", f"{stage['step_ms']['chosen']:.2f}")
    console.print(layers)
    step = report["predicted_step_ms"]
    saving = (step["sequential"] - step["chosen"]) / step["sequential"] if step["sequential"] > 0 else 0.0
    sites_only = step["sites_only"]
    console.print(f"predicted step (sites + compute of the busiest stage + pipeline fill/drain {step['bubble_ms']:.1f} "
                  f"ms; no pipeline sends or DP sync): sequential {step['sequential']:.2f} ms, chosen "
                  f"{step['chosen']:.2f} ms ({saving:.1%} saved); sites alone {sites_only['sequential']:.2f} -> "
                  f"{sites_only['chosen']:.2f} ms; {len(report['sites'])} sites, "
                  f"{report['searches']} searches in {report['planning_s']:.2f} s")
    for note in report["notes"]:
        console.print(f"note: {note}")
    if "shards" in report:
        console.print(_shards.shards_text(report["shards"]), markup=False, highlight=False, soft_wrap=True)


def _moe_table(report: dict, table_type):
    """The expert-parallel sites: per-rank tokens, hidden, expert FFN width, experts over the EP group, top-k."""
    table = table_type(title="expert-parallel MoE sites (per occurrence)", title_justify="left")
    for column, justify in (("stage", "right"), ("site", "left"), ("kind", "left"), ("tokens h ffn", "right"),
                            ("experts/ep k", "right"), ("x/step", "right"), ("plan", "left"), ("seq ms", "right"),
                            ("chosen ms", "right"), ("saving", "right")):
        table.add_column(column, justify=justify, no_wrap=True)
    merged: dict[tuple, dict] = {}
    for entry in report["moe_sites"]:
        key = (entry["name"], entry["key"], entry["plan_label"])
        if key in merged:
            merged[key]["stages"].append(entry["stage"])
        else:
            merged[key] = {**entry, "stages": [entry["stage"]]}
    for row in merged.values():
        seq_ms, chosen_ms = row["predicted_ms"]["sequential"], row["predicted_ms"]["chosen"]
        table.add_row(_stages_label(row["stages"]), row["name"], f"{row['kind']} {'fwd' if row['direction'] == 'forward' else 'bwd'}",
                      f"{row['tokens']} {row['hidden']} {row['ffn']}", f"{row['experts']}/{row['world']} "
                      f"{row['topk']}", str(row["count"]), row["plan_label"], f"{seq_ms:.3f}", f"{chosen_ms:.3f}",
                      f"{(seq_ms - chosen_ms) / seq_ms:.1%}" if seq_ms > 0 else "-")
    return table


def run(args) -> int:
    try:
        if args.search:
            if getattr(args, "shards", False):
                raise ValueError("--shards sizes the shards of a given --tp; leave out --search")
            report, table = build_search(args)
        else:
            report, table = build(args), None
    except (ValueError, TypeError) as exc:
        print(f"hocket plan: {exc}", file=sys.stderr)
        return 2
    if args.json_out == "-":
        json.dump(report, sys.stdout, indent=1)
        sys.stdout.write("\n")
        return 0
    if table is not None:
        print(table)
    else:
        render(report)
    if args.json_out:
        path = Path(args.json_out)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=1) + "\n")
        print(f"wrote {path}")
    return 0
