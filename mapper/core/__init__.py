"""The engine's vocabulary: errors, limits, units, version, the graph and result types, the
model caches' keys, the bottleneck classes. Imports nothing else of mapper."""
