"""Around the pipeline: sweeps and their executors, plan comparisons, power curves."""
