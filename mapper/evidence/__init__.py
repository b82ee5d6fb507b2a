"""Evidence: probe this machine, measure real runs on ONNX Runtime, set them against predictions, calibrate.

profile = probe_machine("me.toml")                         # micro-benchmarks -> hardware profile TOML
m = measure_model("resnet50", {"batch": 1}, runs=10)       # ORT CPU, 1 thread, per-node times matched
compare_measured(map_workload(load_workload("resnet50", {"batch": 1}), load_hardware("me.toml")), m)
calibrated = calibrate("me.toml", [m, ...])                # efficiency curves + launch fitted, with provenance
"""

from mapper.evidence.calibrate import calibrate, holdout_report
from mapper.evidence.compare import compare_measured
from mapper.evidence.measure import Measurement, measure_model, measurement_from_profile
from mapper.evidence.probe import probe_machine
from mapper.evidence.profile_toml import write_toml
from mapper.evidence.profiles import NodeMatch, NodeTime, ProfileTimes, load_profile, match_nodes

__all__ = [
    "probe_machine",
    "write_toml",
    "measure_model",
    "Measurement",
    "measurement_from_profile",
    "compare_measured",
    "load_profile",
    "match_nodes",
    "ProfileTimes",
    "NodeTime",
    "NodeMatch",
    "calibrate",
    "holdout_report",
]
