"""Stage four, cost: the one roofline per kernel, collectives on the interconnect, bottleneck classes."""
