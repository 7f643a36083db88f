"""`hocket simulate`: an event-driven timeline of one training step on a described cluster.

Nothing runs on devices: the model's step (``hocket.models.model_step_sites``) is
scheduled 1F1B over the pipeline stages, every site's plan is expanded into the cost
model's stage pipeline, and identical ranks are simulated once per class.

  hocket simulate --model llama3-405b --tp 8 --pp 16 --dp 128 --seq 8192 --batch 1 \\
      --microbatches 16 --cluster h100-16k --trace step.json --plot step.png
  hocket simulate --plan planned.json --trace step.json      # a planner's JSON (model, cluster, parallel, sites)

``--batch`` is sequences per micro-batch; ``--microbatches`` per DP replica and step
(global batch = batch x microbatches x dp sequences). ``--ep N`` (MoE models) spreads each MoE layer's
experts over N ranks of a data-parallel group and simulates its all-to-all sites. ``--stages auto`` sizes pipeline
stages by device speed; a comma list (``8,8,...``) gives layers per stage.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from hocket.cli import _shards
from hocket.cli._clusters import add_cluster_arguments
from hocket.cli._ranks import positive_int


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "simulate", help="event-driven timeline of a training step (Perfetto trace, PNG)",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = parser.add_argument_group("what to simulate (a model, or a planner's JSON)")
    src.add_argument("--model", default=None, help="model preset (llama3-405b, ...) or a config.json path")
    src.add_argument("--plan", default=None, help="planner JSON: {model, cluster, parallel, sites[...]}; "
                                                  "or one Plan JSON used for every site")
    par = parser.add_argument_group("parallelism and batch")
    par.add_argument("--tp", type=positive_int, default=None, help="tensor-parallel degree (sequence parallel)")
    par.add_argument("--pp", type=positive_int, default=None, help="pipeline stages")
    par.add_argument("--dp", type=positive_int, default=None, help="data-parallel replicas")
    par.add_argument("--ep", type=positive_int, default=None,
                     help="expert-parallel degree of an MoE model (divides --dp and the experts; default 1, or the "
                          "plan file's)")
    par.add_argument("--moe-zipf", type=float, default=None, metavar="S",
                     help="MoE routing skew: Zipf exponent of the experts' popularity (default 0: uniform, or the "
                          "plan file's)")
    par.add_argument("--seq", type=positive_int, default=None, help="sequence length (tokens)")
    par.add_argument("--batch", type=positive_int, default=None, help="sequences per micro-batch (default 1)")
    par.add_argument("--microbatches", "--micro-batches", dest="microbatches", type=positive_int, default=None,
                     help="micro-batches per step and DP replica (default: pp)")
    par.add_argument("--stages", default=None, help="'auto' (by device speed) or layers per stage, e.g. 8,8,...")
    par.add_argument("--dp-sync", choices=("reduce_scatter", "all_reduce"), default=None,
                     help="DP gradient synchronisation (default reduce_scatter + all_gather)")
    add_cluster_arguments(parser, required=False)
    parser.add_argument("--profile", default=None, help="calibration profile JSON measured on that cluster")
    fixed = parser.add_argument_group("the plan of every site not given by --plan (default sequential)")
    fixed.add_argument("--strategy", default=None, help="sequential, bulk, chunked, ring, bidir_ring, tile_fused, "
                                                        "substituted")
    fixed.add_argument("--chunks", type=positive_int, default=None, help="pieces / ring sub-steps / flag groups")
    fixed.add_argument("--transport", default=None, help="collective, p2p, copy_engine, host_staged")
    out = parser.add_argument_group("outputs")
    out.add_argument("--trace", default=None, help="write a Chrome-trace/Perfetto JSON here")
    out.add_argument("--plot", default=None, help="write a PNG timeline here")
    out.add_argument("--json", action="store_true", help="print one JSON summary object instead of the table")
    _shards.add_what_if_argument(parser)
    parser.set_defaults(func=run)


def _stages_arg(text: str | None):
    if text is None or text.strip() == "auto":
        return "auto"
    try:
        values = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise ValueError(f"--stages {text!r} must be 'auto' or a comma list of layer counts, e.g. 8,8,7") from None
    if not values:
        raise ValueError(f"--stages {text!r} lists no stages; give 'auto' or layer counts like 8,8,7")
    return values


def _read_json_arg(text: str, flag: str):
    from hocket.core.files import load_json_file, parse_json

    path = Path(text).expanduser()
    if text.strip().startswith("{"):
        return parse_json(text, f"{flag} (inline JSON)")
    if path.exists():
        return load_json_file(path, what="plan file (write one with `hocket plan --json`)")
    raise ValueError(f"{flag} {text!r} is neither an existing file nor inline JSON; give the path of a "
                     f"`hocket plan --json` file or one Plan as JSON")


def _setting(args, plan_file, name: str, *, aliases: tuple[str, ...] = (), default=None):
    value = getattr(args, name)
    if value is not None:
        return value
    if plan_file is not None:
        for key in (name, *aliases):
            if plan_file.parallel.get(key) is not None:
                return plan_file.parallel[key]
    return default


def build(args) -> tuple[dict, object]:
    """Run the simulation; return (summary as plain data, StepSimulation)."""
    from hocket.core.plan import Plan
    from hocket.hardware import load_cluster
    from hocket.models.step import model_step_sites
    from hocket.sim.metrics import owner_summaries, weighted_utilisation
    from hocket.sim.plans import PlanBook, is_plan_file, parse_plan_file
    from hocket.sim.step import simulate_step

    t0 = time.perf_counter()
    fields = {"strategy": args.strategy, "chunks": args.chunks, "transport": args.transport}
    default_plan = Plan(**{k: v for k, v in fields.items() if v is not None})
    plan_file = None
    if args.plan is not None:
        data = _read_json_arg(args.plan, "--plan")
        if is_plan_file(data):
            plan_file = parse_plan_file(data, source=args.plan)
        else:
            if any(v is not None for v in fields.values()):
                raise ValueError("--plan holds one Plan; do not combine it with --strategy/--chunks/--transport")
            if not isinstance(data, dict):
                raise ValueError(f"--plan {args.plan!r} holds JSON of a {type(data).__name__}; give a planner's "
                                 f"JSON object (with 'sites', from `hocket plan --json`) or one Plan object like "
                                 f'{{"strategy": "chunked", "chunks": 4}}')
            try:
                default_plan = Plan.from_dict(data)
            except (TypeError, ValueError) as exc:
                raise ValueError(f"--plan {args.plan!r} is neither a planner's JSON (no 'sites') nor one Plan "
                                 f"({exc})") from None
    model = args.model or (plan_file.model if plan_file else None)
    cluster_name = args.cluster or (plan_file.cluster if plan_file else None)
    if not model:
        raise ValueError("no model: give --model NAME (e.g. llama3-405b) or a --plan file that names one")
    if not cluster_name:
        raise ValueError("no cluster: give --cluster NAME (e.g. h100-16k; `hocket predict --help` lists presets) "
                         "or a --plan file that names one")
    cluster = load_cluster(cluster_name)
    tp = _setting(args, plan_file, "tp", default=1)
    pp = _setting(args, plan_file, "pp", default=1)
    # context parallelism, recomputation and virtual stages come from a plan file only (`hocket plan --search`)
    planned = plan_file.parallel if plan_file is not None else {}
    cp = int(planned.get("cp") or 1)
    recompute = str(planned.get("recompute") or "none")
    virtual = int(planned.get("virtual") or 1)
    dp = _setting(args, plan_file, "dp", default=None)
    if dp is None:
        dp = max(1, cluster.world_size // (tp * pp * cp))
    ep = int(_setting(args, plan_file, "ep", default=1))
    moe_zipf = float(_setting(args, plan_file, "moe_zipf", default=0.0))
    seq = _setting(args, plan_file, "seq")
    if seq is None:
        raise ValueError("no sequence length: give --seq (e.g. 8192)")
    batch = _setting(args, plan_file, "batch", default=1)
    from hocket.models.catalog import load_model
    from hocket.models.step import check_degrees, check_tokens

    check_degrees(load_model(model), int(tp), int(pp), int(dp), ep)
    check_tokens(int(tp), int(seq), int(batch), cp)
    micro = _setting(args, plan_file, "microbatches", aliases=("micro_batches",), default=None)
    if args.stages is not None:
        stages = _stages_arg(args.stages)
    elif plan_file is not None and plan_file.stage_layers and len(plan_file.stage_layers) == int(pp):
        stages = list(plan_file.stage_layers)  # the partition the planner planned for
    else:
        stages = "auto"
    dp_sync = _setting(args, plan_file, "dp_sync", default="reduce_scatter")
    profile = None
    if args.profile:
        from hocket.hardware.profile import load_profile

        # an explicit file is the user's statement that it describes --cluster (as in `hocket predict`);
        # a corrupt or unreadable file is still reported and ignored
        profile = load_profile(args.profile, expected=None)
    step = model_step_sites(model, tp=int(tp), pp=int(pp), dp=int(dp), seq=int(seq), batch=int(batch),
                            micro_batches=None if micro is None else int(micro), cluster=cluster,
                            stages=stages, dp_sync=dp_sync, cp=cp, recompute=recompute, virtual=virtual, ep=ep,
                            moe_zipf=moe_zipf)
    chooser = PlanBook(plan_file, default=default_plan) if plan_file else default_plan
    t1 = time.perf_counter()
    sim = simulate_step(step, cluster, plan=chooser, profile=profile)
    t2 = time.perf_counter()
    summaries = owner_summaries(sim.timeline)
    step_ms = sim.step_ms
    stages_out = []
    for s in summaries:
        stages_out.append({
            "owner": s.owner, "stage": sim.owner_stage[s.owner], "ranks": sim.owner_ranks[s.owner],
            "compute_ms": s.compute_ms, "exposed_comm_ms": s.exposed_comm_ms, "idle_ms": s.idle_ms,
            "utilisation": s.utilisation(),
        })
    weights = dict(sim.owner_ranks)
    total_ranks = sum(weights.values())
    exposed_mean = sum(s.exposed_comm_ms * weights[s.owner] for s in summaries) / total_ranks
    notes = list(sim.notes) + list(step.notes)
    if plan_file is not None and isinstance(chooser, PlanBook) and chooser.misses:
        notes.append(f"sites not in the plan file ran {default_plan.describe()}: {sorted(chooser.misses)}")
    summary = {
        "model": getattr(step.model, "name", str(model)), "cluster": cluster.name,
        "world": cluster.world_size,
        "parallel": {"tp": step.tp, "pp": step.pp, "dp": step.dp, "ep": step.ep, "seq": step.seq, "batch": step.batch,
                     "micro_batches": step.micro_batches, "stages": [st.layers for st in step.stages]},
        "global_batch_sequences": step.batch * step.micro_batches * step.dp,
        "step_ms": step_ms,
        "planner_predicted_step_ms": plan_file.predicted_step_ms if plan_file else None,
        "utilisation": weighted_utilisation(summaries, weights),
        "exposed_comm_ms_mean": exposed_mean,
        "exposed_comm_ms_max": max((s.exposed_comm_ms for s in summaries), default=0.0),
        "owners": stages_out,
        "rank_classes": len(sim.classes),
        "site_plans": dict(sim.site_plans),
        "tasks": len(sim.timeline.graph),
        "build_s": t1 - t0, "simulate_s": t2 - t1,
        "notes": notes,
    }
    if getattr(args, "what_if", None):
        summary["what_if"] = _shards.what_if_section(step, cluster, plan=chooser, profile=profile,
                                                     transport=args.what_if, baseline_ms=step_ms)
    return summary, sim


def write_outputs(args, summary: dict, sim) -> list[str]:
    from hocket.sim.plot import plot_timeline
    from hocket.sim.trace import write_trace

    written = []
    if args.trace:
        meta = {"model": summary["model"], "cluster": summary["cluster"], "parallel": summary["parallel"],
                "step_ms": round(summary["step_ms"], 6), "site_plans": summary["site_plans"]}
        written.append(str(write_trace(sim.timeline, args.trace, metadata=meta)))
    if args.plot:
        title = (f"{summary['model']} on {summary['cluster']} (tp {summary['parallel']['tp']}, "
                 f"pp {summary['parallel']['pp']}, dp {summary['parallel']['dp']})")
        written.append(str(plot_timeline(sim.timeline, args.plot, title=title)))
    return written


def format_table(summary: dict, written: list[str]) -> str:
    par = summary["parallel"]
    lines = [
        f"{summary['model']} on {summary['cluster']} ({summary['world']} ranks): tp {par['tp']} x pp {par['pp']} "
        f"x dp {par['dp']}" + (f" (ep {par['ep']})" if par.get("ep", 1) != 1 else "")
        + f", seq {par['seq']}, {par['batch']} seq/micro-batch x {par['micro_batches']} "
        f"micro-batches (global batch {summary['global_batch_sequences']} sequences)",
        f"layers per stage: {par['stages']}",
        f"predicted step time: {summary['step_ms']:.3f} ms"
        + (f"  (the planner's estimate: sites, compute and pipeline fill/drain, no sends or DP sync: "
           f"{summary['planner_predicted_step_ms']:.3f} ms)"
           if summary.get("planner_predicted_step_ms") else ""),
        f"exposed communication: mean {summary['exposed_comm_ms_mean']:.3f} ms per rank, "
        f"max {summary['exposed_comm_ms_max']:.3f} ms",
        "utilisation (all ranks): " + ", ".join(f"{k} {v:.1%}" for k, v in summary["utilisation"].items()),
        "",
        f"{'owner (rank class / stage)':<40} {'ranks':>6} {'compute_ms':>12} {'exposed_ms':>11} {'idle_ms':>11}"
        f"  busy per resource",
    ]
    for o in summary["owners"]:
        busy = " ".join(f"{k}={v:.0%}" for k, v in o["utilisation"].items())
        lines.append(f"{o['owner']:<40} {o['ranks']:>6} {o['compute_ms']:>12.3f} {o['exposed_comm_ms']:>11.3f} "
                     f"{o['idle_ms']:>11.3f}  {busy}")
    plans = ", ".join(f"{k}: {v}" for k, v in summary["site_plans"].items())
    lines += ["", f"site plans: {plans}",
              f"{summary['tasks']} tasks over {summary['rank_classes']} rank class(es); "
              f"built in {summary['build_s']:.2f} s, simulated in {summary['simulate_s']:.2f} s"]
    lines += [f"note: {n}" for n in summary["notes"]]
    if "what_if" in summary:
        lines += ["", _shards.what_if_text(summary["what_if"])]
    lines += [f"wrote {w}" for w in written]
    return "\n".join(lines)


def run(args) -> int:
    try:
        summary, sim = build(args)
        written = write_outputs(args, summary, sim)
    except (ValueError, TypeError) as exc:
        print(f"hocket simulate: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps({**summary, "written": written}, sort_keys=True))
    else:
        print(format_table(summary, written))
    return 0
