"""`hocket calibrate`'s microbenchmarks: GEMM grid, transfer curves, contention."""

from hocket.calibrate.config import CalibrateConfig, default_config
from hocket.calibrate.runner import CalibrationRun, Measurements, build_profile, calibrate, measure

__all__ = ["CalibrateConfig", "CalibrationRun", "Measurements", "build_profile", "calibrate", "default_config",
           "measure"]
