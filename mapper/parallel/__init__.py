"""Multi-device mapping: tensor, pipeline and data parallelism over the profile's interconnect.

`collectives` costs all-reduce / all-gather / reduce-scatter / point-to-point with an alpha-beta
model per algorithm and topology; `sharding` splits kernels Megatron-style and inserts the
collectives; `stages` balances pipeline stages by time; `memory` checks capacity per device.
"""
