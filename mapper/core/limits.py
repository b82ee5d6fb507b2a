"""Every limit on untrusted input, in one place; each error message names its limit.

Uploads come from anyone into a shared server: these caps keep one bad file
from taking the process down. Change a value here and every check follows.
Each comment says what the limit bounds on the reference machine (2 cores, a
~4 GiB budget per request, answers in minutes); figures measured there.
"""

MAX_MODEL_FILE_BYTES = 2 << 30  # an ONNX file on disk or uploaded, weights inside included: protobuf's 2 GiB
# message limit. Mapped, never read whole: only its structure is (MAX_STRUCTURE_BYTES)
MAX_STRUCTURE_BYTES = 64 * 1024 * 1024  # bytes of a model file the importer reads: its graph with every weight
# left out (mapper/model/wire.py). Exported Llama-2-70B: ~3 MB; a walk of 64 MB of fields takes ~10 s here
MAX_CONFIG_BYTES = 1024 * 1024  # a Hugging Face config.json (real ones: 1-3 kB), parsed whole
MAX_PARAMETERS = 10**14  # parameters a config's sizes imply (the largest published models: ~2e12), computed from
# its numbers before anything is built (mapper/zoo/config_bounds.py) with MAX_NODES and MAX_CONFIG_TABLE_BYTES
MAX_CONFIG_TABLE_BYTES = 1 << 20  # an array the config builder computes (the RoPE inverse frequencies: 8 bytes
# per pair of head_dim; real head_dims of 64-256 take 256 B-1 KiB)
MAX_MODEL_BYTES = 256 * 1024 * 1024  # a model a sandboxed child writes back (ORT's shapes file, measure's
# optimized.onnx): built from the structure, so far smaller
MAX_PROFILE_BYTES = 1024 * 1024  # a hardware profile file (parsed whole: a few MB of objects, milliseconds)
MAX_PROFILE_NESTING = 32  # arrays/tables inside each other in a hardware profile (real ones: 3);
# checked before json/tomllib, which recurse (10^5 deep: RecursionError)
MAX_NODES = 200_000  # nodes in one graph, If/Loop/Scan bodies included at any depth (Llama-2-70B
# exports ~7,000); import and mapping are linear: ~1-2 GiB, a minute at most
MAX_NODE_INPUTS = 65_536  # inputs of one node (real exports: a Concat of a few hundred); counted while the file is
# read (mapper/model/wire.py), before any of it is parsed
MAX_EDGES = 2_000_000  # node inputs and outputs in one graph, bodies included (Llama-2-70B: ~20,000); with
# MAX_NODES, what bounds the importer's tables: ~1 KiB an edge at most (the threat-model page has the figures)
MAX_TENSORS = 200_000  # initializers, sparse parts and attribute tensors in one file (Llama-2-70B: ~1,500); each
# costs the importer ~1 KiB and ~17 us (2M one-element initializers, a 43 MB file: 2.3 GB, 36 s)
MAX_VALUE_INFOS = 1_000_000  # graph inputs, outputs and value_info entries in one file (~300 B each when mapped)
MAX_DIM = 1 << 31  # one bound dimension
MAX_TENSOR_ELEMENTS = 1 << 52  # elements in one tensor at the bound shapes (shapes only: never allocated;
# import evaluates at most onnx_values.FOLD_MAX_ELEMENTS=1024 per tensor)
MAX_TRACE_BYTES = 512 * 1024 * 1024  # an imported ORT profile / PyTorch trace file: held as bytes while its events
# are decoded one at a time (kept ones ~150 B each): peak under ~1.5x the file
MAX_TRACE_EVENT_BYTES = 1 << 20  # one event of a profile / trace, decoded alone (ORT's are ~300 bytes): ~30 MB of
# objects at most; a 51 MB profile loads in ~2 s at a 10 MB peak
MAX_TRACE_EVENT_SECONDS = 86_400  # one event's duration: longer is not a kernel (such events are skipped)
MAX_TRACE_ROWS = 10_000_000  # rows of a serving trace CSV (read as text: ~2 GB for 10^7 rows of 3 columns)
# and so the requests a trace serves, as MAX_REQUESTS
MAX_REQUESTS = 10_000_000  # requests in one serving simulation: dynamic batching peaks at ~310 bytes a
# request (10^7: 3.1 GB, 10 s here; static 0.6 GB, 0.6 s); 10^8 needed 8+ GiB
MAX_BATCH = 65_536  # a batching policy's max batch (a table of this many service times)
MAX_TOKENS = 1 << 20  # one LLM request's prompt or output length (a trace's token counts too)
MAX_LLM_TOKENS = 20_000_000  # requests + output tokens of one LLM serving run: a scheduler step and a jitter
# draw each; 10^7 took 69 s and 0.5 GB here at batch 1 (2.6 s at batch 32)
MAX_SLICES = 20_000  # slices in one sweep, checked before the grid is built: ~200 slices/s here for
# BERT-base (~55/s for larger models): 2-6 min, rows ~1 kB: 20 MB (10^6: ~5 h)
MAX_COMPARE_SLICES = 2_000  # (batch, seq) slices of one plan comparison: two mappings and two serving runs each
MAX_COMPARE_REQUESTS = 10**8  # slices x requests of one comparison (static batches: ~2e7 requests/s here)
MAX_LOAD_POINTS = 32  # loads of one load curve, each a whole simulation (with the 8 bisection runs:
# 40 runs of at most MAX_REQUESTS, ~7 min)
MAX_POWER_POINTS = 64  # batch sizes in one power curve (a mapping each: about a minute for a large model)
MAX_PARALLEL_DEGREE = 4096  # tp, pp and dp of one plan, each: far past any interconnect's max_devices (which
# bounds tp x pp again); dp only multiplies figures, but a degree beyond this is a typo, not a plan
MAX_POWER_CAP_W = 1e5  # a board power cap, exclusive (W): 100 kW is ~100x the largest accelerator's TDP
MAX_WORKERS = 4096  # sweep workers one run may ask for (a large Dask cluster has a few thousand cores); each
# worker is a process or a Dask task stream, so more than this is a typo, not a cluster
SWEEP_CHUNK_SLICES = 64  # slices per in-process sweep task (a default, not a bound): the progress bar's step
SWEEP_TASKS_PER_WORKER = 4  # a parallel sweep's tasks a worker (a default): few enough that scheduling and each
# task's rows cost little beside the mapping (5,000 BERT-base slices on a 2-worker Dask cluster: 100 tasks of 50
# took 5.9 s, 8 of 625 5.5 s), enough that the last task's wait is short
MAX_CHUNK_SLICES = 100_000  # slices per sweep task at most (a task's rows are held until it finishes)
ORT_SHAPES_MEMORY_BYTES = 4 << 30  # address space of the child running ONNX Runtime's shape inference
ORT_SHAPES_SECONDS = 60  # and its time (an 80-layer decoder takes seconds)
ORT_NODE_QUERIES = 4  # single-node ONNX Runtime inferences one import may start (~0.4 s each)

# Running an uploaded model (mapper measure, the Validation page): a child process under these limits
# (mapper/model/sandbox.py), and an estimate of the run checked against them before it starts
# (evidence/measure_gate.py).
# What the graph computes is known only once it runs (a row count computed from an input, ConstantOfShape of
# it, then a 2048 x 2048 MatMul: 1.1 TFLOP a run, rated 1 FLOP by the gate), so the three limits of the child and
# the count of children hold whatever the estimate said. Each may be set when the server or the CLI starts, as
# MAPPER_<NAME> in its environment (a whole number; mapper/core/settings.py); the figures below are the defaults.
MEASURE_MEMORY_BYTES = 4 << 30  # address space (RLIMIT_AS) of the child running ONNX Runtime; its estimated peak too
# (the per-request budget of the reference machine; BERT-base at seq 32 is estimated at ~2.3 GB)
MEASURE_CPU_SECONDS = 120  # CPU time of that child (RLIMIT_CPU), all its threads: 2 minutes of one core. The whole
# `mapper measure` of ResNet-50 took 3.7 s here, BERT-base at seq 32 31 s; the Validation page's largest model (50
# GFLOP a run, 37 runs) ~25 s of running. The computed-row MatMul above ran 213 s at 2.5 GB when this was 600
MEASURE_WALL_SECONDS = 120  # its wall clock: at 2 minutes the child and its process group are killed
MEASURE_CORES_PER_RUN = 2  # measure children run at once across every session and CLI on the machine: one per this
# many cores (1 on the 2-core reference machine), MAPPER_MEASURE_CONCURRENT to set the count itself
MEASURE_QUEUE_SECONDS = 300  # how long a measurement waits for its turn, its place in line shown; then refused
# (0: refused at once when every slot is taken). A wait is at most ~MEASURE_WALL_SECONDS per run ahead of it
MAX_TRACE_EVENTS = 4_000_000  # events (values) of one profile / trace, with MAX_TRACE_BYTES: each costs ~1-3 us to
# decode whatever its size, so 256 MB of `1,` took 132 s here before this bound (behind one event now: 6 s);
# ORT's ~300-byte events fill MAX_TRACE_BYTES with ~1.8*10^6. Kept ones ~150 B each: at most ~0.6 GB beside the file
TRACE_SQL_SECONDS = 60  # reading one Nsight Systems export (SQLite), from opening it: a query still running past
# this is interrupted (a hostile file's unindexed joins could run for hours). bench/bench_nsys_read.py here: 100,000
# kernels with their launches and two NVTX ranges each (400,000 rows, 18 MB) read in 5 s at a 113 MB peak, 250,000
# in 20 s at 281 MB; ~700,000 kernels reach it. At most MAX_TRACE_EVENTS rows in all, the file at most MAX_TRACE_BYTES
MEASURE_NODE_RUNS = 2_000_000  # node executions of one measurement, all runs, Loop/Scan bodies x trip counts
# (ORT takes ~1-5 us a small node: seconds; a profiled one is a ~300-byte event)
MEASURE_FLOPS = 10**13  # FLOPs of one measurement, all runs: ~3 minutes at ~50 GFLOP/s (one core, fp32)


def limit_text(name: str) -> str:
    """How a limit is named in messages: 'MAX_NODES=200000 (mapper/core/limits.py)'."""
    return f"{name}={globals()[name]} (mapper/core/limits.py)"


MAX_ERROR_LINE_CHARS = 300  # one error line as printed or shown (a name can be megabytes long)

# The dashboard's models, shared by every session (app_pages/held.py): charged by mapper/core/footprint.py's
# estimate (a parsed model, each workload and each mapping of it), not counted in handles: with a count as the
# bound, 8 handles of one hostile file (uploaded under 8 names) could hold ~14 GB.
MODEL_CACHE_BYTES = 2 << 30  # what every session's models may hold together: a quarter of an 8 GiB server; one
# node-dense 190,000-node model with a workload and a mapping is estimated at 0.63 GB (0.55 GB measured)
MODEL_IDLE_SECONDS = 600  # a model no session has shown for this long is released (sooner when the budget is full)
MAPPINGS_PER_MODEL = 16  # mappings kept per model (bindings x profiles x options a session clicks through)
