"""Every limit on untrusted input, in one place; each error message names its limit.

Uploads come from anyone into a shared server: these caps keep one bad file
from taking the process down. Change a value here and every check follows.
"""

MAX_MODEL_BYTES = 256 * 1024 * 1024     # an ONNX file (graph-only uploads are far smaller)
MAX_PROFILE_BYTES = 1024 * 1024         # a hardware profile file
MAX_PROFILE_NESTING = 32                # arrays/tables inside each other in a hardware profile (real ones: 3)
MAX_NODES = 200_000                     # nodes in one graph (Llama-2-70B exports ~7,000)
MAX_DIM = 1 << 31                       # one bound dimension
MAX_TENSOR_ELEMENTS = 1 << 52           # elements in one tensor at the bound shapes
MAX_TRACE_BYTES = 512 * 1024 * 1024     # an imported ORT profile / PyTorch trace file
MAX_TRACE_EVENT_BYTES = 1 << 20         # one event of a profile / trace, decoded alone (ORT's are ~300 bytes)
MAX_TRACE_EVENT_SECONDS = 86_400        # one event's duration: longer is not a kernel (such events are skipped)
MAX_TRACE_ROWS = 10_000_000             # rows of a serving trace CSV
MAX_REQUESTS = 10**8                    # requests in one serving simulation (~50 bytes each)
MAX_BATCH = 65_536                      # a batching policy's max batch
MAX_TOKENS = 1 << 20                    # one LLM request's prompt or output length
MAX_SLICES = 1_000_000                  # slices in one sweep (rows are ~1 kB in memory)
MAX_POWER_POINTS = 64                   # batch sizes in one power curve
ORT_SHAPES_MEMORY_BYTES = 4 << 30       # address space of the child running ONNX Runtime's shape inference
ORT_SHAPES_SECONDS = 60                 # and its time (an 80-layer decoder takes seconds)
ORT_NODE_QUERIES = 4                    # single-node ONNX Runtime inferences one import may start (~0.4 s each)


def limit_text(name: str) -> str:
    """How a limit is named in messages: 'MAX_NODES=200000 (mapper/limits.py)'."""
    return f"{name}={globals()[name]} (mapper/limits.py)"
