"""hocket.hardware: hardware as data (specs, YAML presets, probe, fingerprint, calibration profiles)."""

from hocket.hardware.catalog import cluster_from_dict, list_presets, load_cluster, load_preset
from hocket.hardware.detect import probe
from hocket.hardware.fingerprint import fingerprint, fingerprint_hash
from hocket.hardware.profile import CalibrationProfile, load_profile, save_profile
from hocket.hardware.spec import ClusterSpec, DeviceSpec, IslandSpec, LinkSpec, NodeGroup, NodeSpec, PairOverride
from hocket.hardware.yaml_schema import PresetError

__all__ = ["CalibrationProfile", "ClusterSpec", "DeviceSpec", "IslandSpec", "LinkSpec", "NodeGroup", "NodeSpec",
           "PairOverride", "PresetError", "cluster_from_dict", "fingerprint", "fingerprint_hash", "list_presets",
           "load_cluster", "load_preset", "load_profile", "probe", "save_profile"]
