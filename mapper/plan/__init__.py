"""Stage three, plan: fusion groups, kernels with boundary traffic, layout, tensor-parallel
sharding, and the tile search the cost stage asks."""
