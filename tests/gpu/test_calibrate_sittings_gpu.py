"""hocket calibrate on one GPU times the host issue items in sittings spread over the run and keeps each item's
median: what every sitting read is in the profile, and the kept value is their median."""

from __future__ import annotations

import statistics
from dataclasses import replace

import pytest
import torch

if not torch.cuda.is_available():
    pytest.skip("needs a CUDA GPU", allow_module_level=True)

from hocket.calibrate import calibrate, default_config  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def test_a_one_gpu_calibration_keeps_the_median_of_three_spread_sittings():
    config = replace(default_config(quick=True, device_type="cuda"), issue_sittings=3)
    run = calibrate(config=config, world_size=1, backend="nccl", timeout_s=240, show_progress=False)
    profile = run.profile
    assert profile is not None and profile.device_type == "cuda"
    assert len(profile.issue_sittings) == 3
    for sitting in profile.issue_sittings:
        assert {"launch", "host_copy"} <= set(sitting) and all(us > 0 for us in sitting.values())
    for item, us in profile.issue_us.items():
        assert us == pytest.approx(statistics.median(s[item] for s in profile.issue_sittings if item in s))
