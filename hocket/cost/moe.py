"""The stages of an expert-parallel MoE site (:class:`hocket.core.moe.MoeSite`), as its executors run them.

(Filled in by the MoE cost-model work.)
"""

from __future__ import annotations


def sequential_stages(b) -> None:
    """The whole all-to-all, then the grouped GEMM (``a2a_mm``), or the reverse (``mm_a2a``)."""
    raise NotImplementedError("the MoE cost model is not written yet")
