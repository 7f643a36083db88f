"""Does a CUDA graph replay corrupt memory once the operator context has dropped the buffers it
captured? The GPU test ``test_a_replay_outlives_its_context_dropping_the_buffers`` asserts it does
not, with ``CapturedCall`` keeping them alive; this script runs the same case with that keeping
switched off (``--unpinned``), to show what the test guards against.

    torchrun --nproc_per_node 2 benchmarks/context_churn_check.py [--unpinned]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--unpinned", action="store_true", help="CapturedCall keeps no context buffer alive")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)))
    dist.init_process_group("nccl", device_id=torch.device("cuda", torch.cuda.current_device()))
    import hocket.ops.captured as captured
    from _captured_cases import run_captured_after_context_churn

    if args.unpinned:
        captured.recording_buffers = lambda: contextlib.nullcontext([])
    outcomes = []
    for kind, rows, k, n in (("ag_mm", 256, 128, 192), ("mm_rs", 128, 96, 160)):
        case = dict(kind=kind, rows=rows, k=k, n=n, dtype="bfloat16", seed=1234, calls=3, pinned=not args.unpinned,
                    plan={"strategy": "chunked", "chunks": 2, "order": "local_first"})
        try:
            run_captured_after_context_churn(case)
            outcomes.append(f"{kind}: replays correct, freed memory untouched")
        except (AssertionError, RuntimeError) as exc:
            outcomes.append(f"{kind}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
    for line in outcomes:
        print(f"rank {rank} {'unpinned' if args.unpinned else 'pinned'} {line}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
