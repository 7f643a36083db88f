"""What ``hocket plan --search`` prints and writes: the ranked table (each row says why it loses to the
first), the winner's launch settings for torchtitan and Megatron-LM (and what neither can express), and the
JSON report (the winner's per-site plans in ``hocket.sim.model_plan`` form, which ``hocket simulate --plan``
reads, plus a ``search`` section).

torchtitan keys (``parallelism.*`` of its job config): ``data_parallel_replicate_degree``,
``data_parallel_shard_degree``, ``tensor_parallel_degree``, ``context_parallel_degree``,
``pipeline_parallel_degree``, ``pipeline_parallel_schedule`` (``1F1B`` or ``Interleaved1F1B``),
``pipeline_parallel_microbatch_size``, ``pipeline_parallel_layers_per_stage`` (interleaving),
``fsdp_reshard_after_forward`` (``never`` under ``gradients`` sharding: the gathered weights stay through the
backward; ``always`` under ``full``; torchtitan's ``default`` is ``never`` with pp > 1), and
``activation_checkpoint.mode`` (``none``/``selective``/``full``), ``training.local_batch_size`` (one rank's
sequences per gradient-accumulation step: ``micro_batch * micro_batches`` with pp > 1, split into pipeline
micro-batches; ``micro_batch`` with pp = 1), ``training.global_batch_size`` (so that pp = 1 accumulates
``micro_batches`` steps), ``training.seq_len``, and for MoE models ``parallelism.expert_parallel_degree``
(torchtitan's EP borrows its ranks from the data-parallel shard and context dimensions, as hocket's EP group lies
inside the DP group). torchtitan's FSDP shards weights, gradients and optimizer state together: a candidate with
optimizer-only sharding maps to ``data_parallel_shard_degree`` with a note; with pp > 1
``torch.distributed.pipelining`` keeps FSDP's gradients unsharded (fp32, the reduce dtype) until the step's last
backward and reduce-scatters them once, so ``gradients`` and ``full`` winners with pp > 1 carry a note that their
sharded-gradient memory does not hold there.
Megatron-LM arguments: ``--tensor-model-parallel-size``, ``--sequence-parallel``,
``--pipeline-model-parallel-size``, ``--num-layers-per-virtual-pipeline-stage``,
``--context-parallel-size``, ``--micro-batch-size``, ``--global-batch-size``, ``--seq-length``,
``--use-distributed-optimizer`` (optimizer sharding; it keeps the whole fp32 gradient buffer, so it cannot
express ``gradients``: that level is Megatron-FSDP's ``--use-megatron-fsdp --data-parallel-sharding-strategy
optim_grads``, given with a note), ``--use-torch-fsdp2`` (full sharding),
``--recompute-granularity``/``--recompute-method``/``--recompute-num-layers``,
``--decoder-first-pipeline-num-layers``/``--decoder-last-pipeline-num-layers`` (Megatron's only uneven
split: the first and last stage differ, the middle ones are equal), ``--expert-model-parallel-size`` with
``--expert-tensor-parallel-size 1`` (MoE models: experts whole on each rank, as ``hocket.models.step`` prices them).
Neither splits a tensor-parallel weight unevenly: a ``mixed_tp`` winner's shards (hocket's ``shard_rows``) and its
TP groups' rank order are reported as not expressible, and it has no ``hocket simulate`` plan (the simulator runs
even TP shards).
"""

from __future__ import annotations

import importlib

from hocket.search.memory import GIB
from hocket.search.run import SearchOutcome, flops_per_token

REPORT_VERSION = 1
FLOPS_FORMULA = ("6*N + 12*L*q*S (PaLM appendix B; N = parameters less the input embedding, MoE: those a token passes "
                 "through; q = heads x head size, MLA: heads x (query/key + value head sizes) / 2)")


RESHARD_AFTER_FORWARD = {"gradients": "never", "full": "always"}
"""torchtitan's ``parallelism.fsdp_reshard_after_forward`` per sharding level (``never``: weights gathered once
and kept through the backward; ``always``: gathered again for the backward)."""

GROUPING_TEXT = {
    "uniform": "one device type",
    "stages": "pipeline stages over device-type blocks, layers by speed",
    "replicas": "each device type its own DP replicas, the batch split by speed",
    "mixed_tp": "TP groups over device types [devices per group], shards by speed",
}
"""What each grouping (``Candidate.grouping``) means, in the table's legend."""


def _why(p, best) -> str:
    """The main reason ``p`` is slower than ``best`` (the largest difference among its parts)."""
    if p is best:
        return "best"
    diffs = {
        "bubble": p.bubble_ms - best.bubble_ms,
        "exposed comm": p.exposed_ms - best.exposed_ms,
        "compute": (p.step_ms - p.bubble_ms - p.exposed_ms) - (best.step_ms - best.bubble_ms - best.exposed_ms),
    }
    what = max(diffs, key=lambda k: diffs[k])
    gap = p.best_ms / best.best_ms - 1.0
    if gap <= 0:  # analytic only, below a simulated figure: the re-rank did not reach it
        return f"{gap * 100:+.1f}% analytic (not simulated); the simulated ones rank first"
    return f"+{gap * 100:.1f}%: {what} +{diffs[what] / 1e3:.2f} s"


def rows(outcome: SearchOutcome) -> list[dict]:
    best = outcome.winner
    out = []
    for i, p in enumerate(outcome.ranked, 1):
        c = p.candidate
        peak = max(p.memory, key=lambda m: m.total / m.limit)
        out.append({
            "rank": i, "config": c.label(), "grouping": c.grouping, "stages": list(p.stages),
            "candidate": c.to_dict(), "tp_shards": p.shards,
            "step_ms": p.best_ms, "analytic_ms": p.step_ms, "simulated_ms": p.simulated_ms,
            "tokens_per_s": outcome.global_batch * outcome.seq / (p.best_ms / 1e3),
            "mfu": p.mfu * p.step_ms / p.best_ms, "bubble_fraction": p.bubble_ms / p.step_ms,
            "exposed_comm_ms": p.exposed_ms, "dp_sync_ms": p.dp_ms,
            "memory_gib": {m.device: round(max(x.total for x in p.memory if x.device == m.device) / GIB, 2)
                           for m in p.memory},
            "peak_memory": peak.to_dict(), "why": _why(p, best),
        })
    return out


def launch_settings(outcome: SearchOutcome) -> dict:
    """torchtitan and Megatron-LM settings of the winner, and what they cannot express."""
    p = outcome.winner
    c = p.candidate
    notes = []
    titan = {
        "parallelism.data_parallel_replicate_degree": c.dp if c.sharding == "replicated" else 1,
        "parallelism.data_parallel_shard_degree": 1 if c.sharding == "replicated" else c.dp,
        "parallelism.tensor_parallel_degree": c.tp,
        "parallelism.context_parallel_degree": c.cp,
        "parallelism.pipeline_parallel_degree": c.pp,
        "parallelism.pipeline_parallel_microbatch_size": c.micro_batch,
        "activation_checkpoint.mode": c.recompute,
        "training.local_batch_size": c.micro_batch * c.micro_batches if c.pp > 1 else c.micro_batch,
        "training.global_batch_size": outcome.global_batch,
        "training.seq_len": outcome.seq,
    }
    if c.sharding in RESHARD_AFTER_FORWARD:
        titan["parallelism.fsdp_reshard_after_forward"] = RESHARD_AFTER_FORWARD[c.sharding]
    if outcome.model.is_moe:
        titan["parallelism.expert_parallel_degree"] = c.ep
    if c.pp > 1:
        titan["parallelism.pipeline_parallel_schedule"] = "1F1B" if c.schedule == "1f1b" else "Interleaved1F1B"
        if c.schedule == "interleaved":
            titan["parallelism.pipeline_parallel_layers_per_stage"] = outcome.model.num_hidden_layers // (
                c.pp * c.virtual)
    if c.sharding == "optimizer":
        notes.append("torchtitan: FSDP shards weights and gradients too; optimizer-only sharding (ZeRO-1) is not "
                     "a torchtitan setting (the shard degree above is the nearest)")
    if c.sharding in ("gradients", "full") and c.pp > 1:
        notes.append(f"torchtitan: with pp > 1 torch.distributed.pipelining keeps FSDP's gradients unsharded in fp32 "
                     f"(the reduce dtype) until the step's last backward and reduce-scatters them once, so the "
                     f"{c.sharding} level's sharded gradients (4/dp bytes per parameter) become 4 bytes per "
                     f"parameter there")
    if c.sharding == "gradients" and c.pp == 1 and c.micro_batches > 1:
        notes.append("torchtitan: with pp = 1 FSDP reshards after every micro-batch's backward, so the weights are "
                     "gathered once per accumulated micro-batch, not once per step")
    megatron = [f"--tensor-model-parallel-size {c.tp}", f"--pipeline-model-parallel-size {c.pp}",
                f"--context-parallel-size {c.cp}", f"--micro-batch-size {c.micro_batch}",
                f"--global-batch-size {outcome.global_batch}", f"--seq-length {outcome.seq}"]
    if c.tp > 1:
        megatron.append("--sequence-parallel")
    if outcome.model.is_moe:
        megatron += [f"--expert-model-parallel-size {c.ep}", "--expert-tensor-parallel-size 1"]
    if c.schedule == "interleaved":
        megatron.append(f"--num-layers-per-virtual-pipeline-stage "
                        f"{outcome.model.num_hidden_layers // (c.pp * c.virtual)}")
    if c.sharding == "optimizer":
        megatron.append("--use-distributed-optimizer")
    elif c.sharding == "gradients":
        megatron += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads",
                     "--use-distributed-optimizer", "--no-gradient-accumulation-fusion"]
        notes.append("Megatron-LM: its distributed optimizer (--use-distributed-optimizer alone) shards the optimizer "
                     "states and fp32 master weights but keeps the whole fp32 gradient buffer, so it cannot express "
                     "the gradients level; the arguments above are Megatron-FSDP's ZeRO-2 strategy (optim_grads, "
                     "Megatron-Core >= 0.14), whose combination with pipeline parallelism is not checked here")
    elif c.sharding == "full":
        megatron += ["--use-torch-fsdp2"]
    if c.recompute == "selective":
        megatron.append("--recompute-granularity selective")
    elif c.recompute == "full":
        megatron += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    stages = list(p.stages)
    if len(set(stages)) > 1:
        middle = stages[1:-1]
        if len(set(middle)) <= 1 and c.pp > 2:
            megatron += [f"--decoder-first-pipeline-num-layers {stages[0]}",
                         f"--decoder-last-pipeline-num-layers {stages[-1]}"]
        elif c.pp == 2:
            megatron += [f"--decoder-first-pipeline-num-layers {stages[0]}",
                         f"--decoder-last-pipeline-num-layers {stages[-1]}"]
        else:
            notes.append(f"Megatron-LM: the uneven split {stages} differs in middle stages; only the first and last "
                         f"stage can differ there")
        notes.append(f"torchtitan: the uneven layer split {stages} needs a manual split "
                     f"(parallelism.module_fqns_per_model_part), not a degree key")
    if c.order:
        notes.append(f"device order: the stages take the node groups in the order {' > '.join(c.order)}; list "
                     f"the cluster's nodes in that order (ranks follow it)")
    if c.grouping == "mixed_tp" and p.shards:
        sizes = "; ".join(f"{block} {info['sites'][0]} {info['sizes'][0]}" for block, info in p.shards.items())
        first = next(iter(p.shards.values()))
        notes.append(f"neither: uneven tensor-parallel shards cannot be expressed in torchtitan or Megatron-LM (both "
                     f"split every TP weight evenly over tp); hocket's operators take them (shard_rows=): per rank of "
                     f"the TP group {first['ranks']} ({', '.join(first['devices'])}): {sizes}")
    if c.split:
        notes.append(f"neither: the uneven data-parallel batch split {[list(x) for x in c.split]} (replicas x "
                     f"micro-batches per device block) is not expressible; both give every replica the same "
                     f"batch")
    checked = _check_torchtitan(titan)
    if checked:
        notes.append(checked)
    return {"torchtitan": titan, "megatron": megatron, "not_expressible": notes}


def _check_torchtitan(keys: dict) -> str:
    """Check the ``parallelism.*`` keys against torchtitan's own config class when it is installed (0.3:
    ``torchtitan.config.configs.ParallelismConfig``; earlier: ``torchtitan.config.job_config.Parallelism``)."""
    found = None
    for module, name in (("torchtitan.config.configs", "ParallelismConfig"),
                         ("torchtitan.config.job_config", "Parallelism")):
        try:
            found = getattr(importlib.import_module(module), name)
            break
        except Exception:  # noqa: BLE001 - absent or another layout: try the next, else say so
            continue
    if found is None:
        return "torchtitan is not installed here: the keys follow its documented job config, unchecked"
    fields = set(getattr(found, "__dataclass_fields__", {}))
    unknown = [k for k in keys if k.startswith("parallelism.") and k.split(".", 1)[1] not in fields]
    where = f"torchtitan's {found.__name__}"
    return f"{where} lacks {unknown}" if unknown else f"checked against {where}"


def to_json(outcome: SearchOutcome, *, plan: dict | None = None) -> dict:
    """The report: the winner's plan (``hocket.sim.model_plan`` schema, when given) plus ``search``."""
    out = dict(plan or {})
    out["search"] = {
        "version": REPORT_VERSION, "model": outcome.model.name, "cluster": outcome.cluster.name,
        "seq": outcome.seq, "global_batch": outcome.global_batch,
        "flops_per_token": flops_per_token(outcome.model, outcome.seq), "flops_formula": FLOPS_FORMULA,
        "candidates": len(outcome.space.candidates), "evaluated": outcome.evaluated, "pruned_by_space": dict(outcome.space.pruned),
        "pruned_by_memory": dict(outcome.memory_pruned),
        "examples": {**outcome.space.examples, **outcome.memory_examples},
        "distinct_sites": outcome.distinct_sites, "seconds": outcome.seconds,
        "ranked": rows(outcome), "launch": launch_settings(outcome), "notes": list(outcome.notes),
    }
    return out


def format_table(outcome: SearchOutcome) -> str:
    lines = [f"{outcome.model.name} on {outcome.cluster.describe()}; seq {outcome.seq}, global batch "
             f"{outcome.global_batch} sequences",
             f"{outcome.evaluated} candidates"
             + (f" ({len(outcome.space.candidates)} in the space, the rest in other device-block orders)"
                if outcome.evaluated > len(outcome.space.candidates) else "")
             + f", {outcome.space.pruned_total} pruned by the space, "
             f"{sum(outcome.memory_pruned.values())} by memory; {outcome.distinct_sites} distinct sites planned; "
             f"{outcome.seconds:.1f} s",
             f"{'#':>2} {'configuration':72} {'step s':>8} {'tok/s':>9} {'MFU':>5} {'bubble':>6} {'exp.s':>6} "
             f"{'mem GiB':>8}  why"]
    for r in rows(outcome):
        sim = "*" if r["simulated_ms"] is not None else " "
        lines.append(f"{r['rank']:>2} {r['config'][:72]:72} {r['step_ms'] / 1e3:>7.2f}{sim} {r['tokens_per_s']:>9.0f} "
                     f"{r['mfu']:>5.2f} {r['bubble_fraction']:>6.3f} {r['exposed_comm_ms'] / 1e3:>6.2f} "
                     f"{r['peak_memory']['total_gib']:>8.1f}  {r['why']}")
    best = rows(outcome)[0]
    lines.append(f"stages (layers): {best['stages']}; * = re-ranked by the event simulator; MFU: {FLOPS_FORMULA}")
    shown = dict.fromkeys(r["grouping"] for r in rows(outcome))
    lines.append("grouping (after rc: in each configuration): " + "; ".join(f"{g}: {GROUPING_TEXT[g]}" for g in shown))
    for reason, count in sorted({**outcome.space.pruned, **outcome.memory_pruned}.items(), key=lambda kv: -kv[1]):
        lines.append(f"  pruned {count:>5}: {reason}")
    launch = launch_settings(outcome)
    lines.append("torchtitan: " + " ".join(f"{k}={v}" for k, v in launch["torchtitan"].items()))
    lines.append("Megatron-LM: " + " ".join(launch["megatron"]))
    lines += [f"  note: {n}" for n in launch["not_expressible"]]
    lines += [f"note: {n}" for n in outcome.notes]
    return "\n".join(lines)


def winner_plan(outcome: SearchOutcome, *, profile=None) -> dict | None:
    """The winner's per-site plans in ``hocket plan --json`` form (None under the ``replicas`` grouping,
    whose replicas run different micro-batch counts: ``hocket simulate`` runs one; None under ``mixed_tp``, whose
    uneven TP shards the simulator does not run). Its ``parallel`` section carries ``sharding`` and ``dp_sync``
    (``all_reduce`` when replicated, else ``reduce_scatter``), which ``hocket simulate`` runs after the last
    backward; the per-micro-batch collectives of ``gradients`` / ``full`` sharding are not in its step graph."""
    from hocket.search.run import SITE_SPACE
    from hocket.sim.model_plan import plan_model

    p = outcome.winner
    c = p.candidate
    if c.split or c.grouping == "mixed_tp":
        return None
    cluster = outcome.clusters.get(c.order, outcome.cluster)
    plan = plan_model(outcome.model, cluster, tp=c.tp, pp=c.pp, dp=c.dp, seq=outcome.seq,
                      batch=c.micro_batch, micro_batches=c.micro_batches, stages=list(p.stages), profile=profile,
                      space_config=SITE_SPACE, cp=c.cp, recompute=c.recompute, ep=c.ep)
    # hocket simulate reads dp_sync (its step-end gradient sync); sharding is for the reader
    plan["parallel"].update(sharding=c.sharding, dp_sync="all_reduce" if c.sharding == "replicated" else "reduce_scatter")
    return plan
