"""A/B of ``hocket calibrate``'s ``host_copy`` issue item on one GPU: the stream switch through
``torch.cuda.stream`` (the item before 652d9ab) against ``on_stream`` with an event of the caller's stream
(the item since, as the offload executors and the relay issue a piece's copy). Interleaved rounds of 50
calls each; host microseconds per call, median / min / max over the rounds.

    python benchmarks/probe_host_copy_item.py [--rounds 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from hocket.calibrate.issue import issue_items


def items(device: torch.device) -> dict:
    """The item as calibrate times it now (``issue_items``'s ``host_copy``) and as it did before 652d9ab."""
    pinned = torch.randn(4096).to(torch.bfloat16).pin_memory()
    on_device = torch.empty(4096, device=device, dtype=torch.bfloat16)
    side, landed = torch.cuda.Stream(device), torch.cuda.Event()

    def through_torch_stream() -> None:
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):
            on_device.copy_(pinned, non_blocking=True)
            landed.record(side)
        torch.cuda.current_stream(device).wait_event(landed)

    current = issue_items(group=None, device=device, dtype=torch.bfloat16)["host_copy"]
    return {"torch.cuda.stream": through_torch_stream, "on_stream": current}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds of 50 calls per item")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("needs a CUDA GPU")
        return 2
    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    fns = items(device)
    for fn in fns.values():
        fn()  # warm-up
    samples: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.rounds):
        for name, fn in fns.items():
            start = time.perf_counter()
            for _ in range(50):
                fn()
            samples[name].append((time.perf_counter() - start) * 1e6 / 50)
        torch.cuda.synchronize(device)
    for name, values in samples.items():
        print(f"{name:18s} median {statistics.median(values):6.1f} us  min {min(values):6.1f}  max {max(values):6.1f}"
              f"  ({len(values)} rounds of 50)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
