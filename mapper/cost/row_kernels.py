"""Row kernels: a norm or a fused elementwise chain as a GPU serving engine's hand-written kernel runs it.

vLLM's RMSNorm, SiLU-and-mul and rotary-embedding kernels (the ones Vidur measured, docs/validation.md)
launch one thread block per row (token) and walk the row one fp16 element per thread per step. Two limits
follow, both set by one DRAM load latency `L` (Little's law: bytes in flight = bandwidth x latency):

- latency chain: a block's threads take ceil(row / threads) dependent steps of one load each; the rows
  that fit the GPU at once (threads_per_unit / threads per SM) run together, the rest in further waves:
  `waves * steps * L`. This is the floor of a decode step's norm (4 us at 4096 wide, 7 us at 8192).
- issue rate: with one element in flight per resident thread, the memory system sees
  `units * threads_per_unit * element bytes / L` (about 1 TB/s on A100, half its DRAM peak), and every
  access counts, a norm's second read of its row too.

The kernel takes the longer of the two (never faster than its DRAM stream). Profiles that do not give
`memory.dram_latency_s` and `compute.threads_per_unit` keep the plain vector roofline.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from mapper.core.result import Kernel
from mapper.core.vocab import KernelRule
from mapper.hardware.profile import HardwareProfile


@dataclass(frozen=True, slots=True)
class RowKernel:
    """How a runtime's kernel walks its rows: threads per row and how often it reads its input."""

    max_threads: int  # threads of the one block a row gets
    input_reads: int  # passes over the input (a norm reads its row for the variance, then to normalize)
    source: str


ROW_KERNELS: dict[str, RowKernel] = {
    KernelRule.NORM: RowKernel(
        1024,
        2,
        "vLLM csrc/layernorm_kernels.cu rms_norm_kernel: grid(num_tokens), block(min(hidden, 1024)); a variance"
        " loop then a normalize loop over the row, one element per thread per step",
    ),
    KernelRule.ELEMENTWISE_CHAIN: RowKernel(
        1024,
        1,
        "vLLM csrc/activation_kernels.cu silu_and_mul_kernel: grid(num_tokens), block(min(d, 1024)), one element"
        " per thread per step; csrc/pos_encoding_kernels.cu rotary_embedding_kernel: grid(num_tokens),"
        " block(min(heads * rot_dim / 2, 512)) over element pairs, the same steps per thread",
    ),
}


def row_kernel_memory_s(kernel: Kernel, hw: HardwareProfile, act_bytes: float, dram_s: float) -> float | None:
    """Memory time of a row kernel: the longer of its latency chain and its issue-rate-bound stream (never
    below `dram_s`, the DRAM stream); None where the rule does not apply (not a row kernel, or the profile
    lacks the DRAM latency or threads per unit)."""
    impl = ROW_KERNELS.get(kernel.rule)
    latency, per_unit = hw.dram_latency_s, hw.threads_per_unit
    rows, length = kernel.reduction_rows or kernel.rows, kernel.reduction_length or kernel.row_length
    if impl is None or latency is None or per_unit is None or rows <= 0 or length <= 0:
        return None
    threads = min(length, impl.max_threads)
    resident_rows = hw.compute_units * max(per_unit // threads, 1)
    chain_s = math.ceil(rows / resident_rows) * math.ceil(length / threads) * latency
    issued = kernel.dram_bytes + (impl.input_reads - 1) * rows * length * act_bytes
    issue_s = issued * latency / (hw.compute_units * per_unit * act_bytes)
    return max(chain_s, issue_s, dram_s)
