"""The parallel search's torchtitan launch keys are checked against torchtitan's own config class (0.3 layout)."""

from __future__ import annotations

import pytest

from hocket.search.report import _check_torchtitan


def test_the_launch_keys_are_fields_of_torchtitans_parallelism_config():
    pytest.importorskip("torchtitan.config.configs", reason="torchtitan 0.3 is not installed")
    keys = {f"parallelism.{name}": 1 for name in (
        "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
        "context_parallel_degree", "pipeline_parallel_degree", "pipeline_parallel_microbatch_size",
        "pipeline_parallel_schedule", "pipeline_parallel_layers_per_stage", "expert_parallel_degree",
        "fsdp_reshard_after_forward")}
    assert _check_torchtitan(keys) == "checked against torchtitan's ParallelismConfig"
    wrong = _check_torchtitan({**keys, "parallelism.expert_degree": 2})
    assert "lacks ['parallelism.expert_degree']" in wrong
