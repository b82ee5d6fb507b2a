"""Every limit on untrusted input, in one place; each error message names its limit.

Uploads come from anyone into a shared server: these caps keep one bad file
from taking the process down. Change a value here and every check follows.
"""

MAX_MODEL_BYTES = 256 * 1024 * 1024     # an ONNX file (graph-only uploads are far smaller)
MAX_PROFILE_BYTES = 1024 * 1024         # a hardware profile file
MAX_NODES = 200_000                     # nodes in one graph (Llama-2-70B exports ~7,000)
MAX_DIM = 1 << 31                       # one bound dimension
MAX_TENSOR_ELEMENTS = 1 << 52           # elements in one tensor at the bound shapes
MAX_GRAPH_DEPTH = 8                     # nesting of If/Loop/Scan subgraphs we look into


def limit_text(name: str) -> str:
    """How a limit is named in messages: 'MAX_NODES=200000 (mapper/limits.py)'."""
    return f"{name}={globals()[name]} (mapper/limits.py)"
