"""Stage two, work: per node FLOPs, bytes, op class and layer type (-> Workload)."""
