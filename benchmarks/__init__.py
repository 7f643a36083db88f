"""The benchmark scripts, a package so that they import each other by name.

Run them from the repository root as modules (``torchrun --nproc_per_node 2 -m benchmarks.bench_captured``); the
scripts that import no sibling also run by path (``python benchmarks/bench_single_gpu.py``,
``torchrun ... benchmarks/bench_multigpu.py``). The analysis of their results lines is the library's
(``hocket validate``, ``hocket regret``: ``hocket.validate``).
"""
