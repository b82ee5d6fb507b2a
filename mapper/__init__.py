"""mapper: map an ONNX model onto an accelerator and say what limits it.

The public API. The dashboard and the CLI use only these names.

    model = open_model("resnet50")                               # or a path, or uploaded bytes: parsed once
    workload = model.bind({"batch": 8})                          # the graph at these shapes, its work
    result = map_workload(workload, load_hardware("h100-sxm"), PlanOptions(dtype="bf16"))
    document = mapping_document(result)                          # what --json prints
    answer = assess_slice(model, {"batch": 8}, load_hardware("h100-sxm"), PlanOptions(), Question())
    answer.document()                                             # the slice's one assessment: every view's
"""

from mapper.core.errors import MapperError, error_line, printable
from mapper.core.graph import Graph, LayerType, OpClass
from mapper.core.limits import MAPPINGS_PER_MODEL, MAX_PARALLEL_DEGREE, MODEL_CACHE_BYTES, MODEL_IDLE_SECONDS
from mapper.core.options import PlanOptions
from mapper.core.result import KernelAssessment, KernelEstimate, MappingResult
from mapper.core.settings import setting, setting_text
from mapper.core.targets import TARGET_ROWS, Targets
from mapper.core.units import (
    DURATION_UNITS,
    MINUTE_S,
    format_bytes,
    format_duration,
    format_energy,
    format_number,
    overload_sentence,
)
from mapper.core.version import __version__
from mapper.cost.bottleneck import SPEEDUP_DEFINITION
from mapper.cost.roofline import MEMORY_STALL_DEFINITION
from mapper.explore.power import power_curve
from mapper.handle import BUILTIN_DEFAULT_DIMS, ModelHandle, open_model
from mapper.hardware.load import edit_profile, list_hardware, load_hardware
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.schema_errors import ProfileError
from mapper.pipeline import (
    FUSION_POLICIES,
    GQA_DECODES,
    KV_CACHE_MODES,
    KV_DTYPES,
    LAUNCHES,
    PLAN_DTYPES,
    RUNTIMES,
    SPARSITIES,
    WEIGHT_DTYPES,
    dim_roles,
    flatten_profile,
    load_model,
    load_workload,
    map_workload,
)
from mapper.plan.layout import LAYOUTS
from mapper.report.answer import AnswerRow, answer_rows, headline, load_text, precision_text
from mapper.report.document import mapping_document
from mapper.report.groups import group_kernels, layer_pattern, module_path
from mapper.report.markdown import markdown_code, markdown_text
from mapper.report.reproduce import (
    PLAN_FIELDS,
    PlanField,
    format_option,
    options_from_query,
    options_query,
    parse_option,
    reproduce_command,
)
from mapper.report.verdict import Finding, assessed_failure, first_failure, verdict_sentence
from mapper.serve.continuous import SCHEDULERS, LLMServingConfig, LLMServingResult
from mapper.serve.disaggregated import DisaggregatedRun, Disaggregation, Pool, simulate_disaggregated
from mapper.serve.engine import simulate_model_serving
from mapper.serve.llm import DEFAULT_OUTPUT_TOKENS, ServeRequest, ServingRun, is_decoder, serve_model
from mapper.serve.load_curve import load_curve
from mapper.serve.question import LoadSource, Question, ServedLoad
from mapper.serve.serving import ServingConfig, ServingResult, simulate_serving
from mapper.serve.speculative import DEFAULT_DRAFT_TOKENS, SpeculativeConfig, expected_tokens, validate_speculative
from mapper.serve.steps import open_draft
from mapper.train.document import training_document, training_sheet
from mapper.train.options import PIPELINE_SCHEDULES, RECOMPUTE_POLICIES, TRAIN_DTYPES, TrainOptions
from mapper.train.options import check_devices as check_train_devices
from mapper.train.review import TrainingReview, review_training
from mapper.train.step import train_step
from mapper.train.totals import FLOP_CONVENTION, TrainingResult
from mapper.work.workload import Workload, analyze_graph
from mapper.zoo import ZOO_NAMES, build_zoo_model, list_zoo, zoo_model_bytes

# Sweeps, comparisons, measurements, sheets, charts and the run store load pandas/onnxruntime/plotly/SQLAlchemy
# (the extras, mapper/core/extras.py): imported on first use, so `import mapper` needs onnx and numpy only.
# "module:attr" gives a public name to an attribute named otherwise.
_LAZY = {
    "SweepSpec": "mapper.explore.sweep",
    "SweepResult": "mapper.explore.sweep",
    "run_sweep": "mapper.explore.sweep",
    "write_table": "mapper.explore.sweep",
    "SearchSpec": "mapper.explore.search_space",
    "SearchResult": "mapper.explore.search",
    "SEARCH_TPS": "mapper.explore.search_space:TP_CHOICES",
    "SEARCH_PPS": "mapper.explore.search_space:PP_CHOICES",
    "SEARCH_CHUNKS": "mapper.explore.search_space:CHUNK_CHOICES",
    "SEARCH_BATCH_CAPS": "mapper.explore.search_space:BATCH_CAPS",
    "run_search": "mapper.explore.search",
    "search_sheet_bytes": "mapper.explore.search_output",
    "search_record": "mapper.explore.search_output",
    "search_configurations": "mapper.explore.search_output:configuration_rows",
    "search_frontier_figure": "mapper.explore.search_output:frontier_figure",
    "ExecutorSpec": "mapper.explore.executors",
    "executor_spec": "mapper.explore.executors",
    "Comparison": "mapper.explore.compare",
    "CompareSettings": "mapper.explore.compare",
    "compare_plans": "mapper.explore.compare",
    "comparison_document": "mapper.explore.compare_output",
    "plan_spec": "mapper.explore.compare_inputs",
    "write_comparison": "mapper.explore.compare_output",
    "COMPARE_METRICS": "mapper.explore.compare_inputs:METRICS",
    "COMPARE_SERVING_FIELDS": "mapper.explore.compare_inputs:SERVING_FIELDS",
    "probe_machine": "mapper.evidence",
    "measure_model": "mapper.evidence",
    "Measurement": "mapper.evidence",
    "compare_measured": "mapper.evidence",
    "load_profile": "mapper.evidence",
    "calibrate": "mapper.evidence",
    "measurement_from_profile": "mapper.evidence",
    "sheet_bytes": "mapper.report.sheet",
    "write_sheet": "mapper.report.sheet",
    "csv_bytes": "mapper.report.tables",
    "class_color": "mapper.report.charts",
    "layer_share_figure": "mapper.report.charts",
    "roofline_figure": "mapper.report.charts",
    "timeline_figure": "mapper.report.charts",
    "CHART_LAYOUT": "mapper.report.charts:LAYOUT",
    "Assessment": "mapper.review.assessment",
    "assess_slice": "mapper.review.assessment",
    "question_flags": "mapper.review.assessment",
    "ReviewRequest": "mapper.review.review",
    "Review": "mapper.review.review",
    "run_review": "mapper.review.review",
    "REVIEW_OWNERS": "mapper.core.classes:OWNERS",
    "review_document": "mapper.review.packet",
    "packet_bytes": "mapper.review.packet",
    "review_command": "mapper.review.packet",
    "proving_artifact": "mapper.review.proof",
    "ProvingArtifact": "mapper.review.proof",
    "first_failing_slice": "mapper.review.first_slice",
    "parse_target": "mapper.review.first_slice",
    "record_run": "mapper.store.record:record",
    "run_sheet": "mapper.store.record",
    "store_url_from_env": "mapper.store.kpis",
    "team_view_from_env": "mapper.store.kpis",
    "RunScope": "mapper.store.owners",
    "new_session_token": "mapper.store.owners",
    "is_session_token": "mapper.store.owners",
    "public_run_id": "mapper.store.owners",
    "load_trends": "mapper.store.trend",
    "read_trends": "mapper.store.trend",
    "session_owner": "mapper.store.owners:owner_of",
    "trend_regressions": "mapper.store.trend:regressions",
    "trend_document": "mapper.store.trend",
    "TREND_KPIS": "mapper.store.kpis:KPIS",
    "DEFAULT_TREND_THRESHOLD": "mapper.store.kpis:DEFAULT_THRESHOLD",
    "trend_figure": "mapper.store.chart",
}


def __getattr__(name: str):
    if name in _LAZY:
        from mapper.core.extras import require  # an absent extra: one MapperError naming it, not a traceback

        module, _, attr = _LAZY[name].partition(":")
        return getattr(require(module, f"mapper.{name}"), attr or name)
    raise AttributeError(f"module 'mapper' has no attribute {name!r}")


__all__ = [
    "FLOP_CONVENTION",
    "PIPELINE_SCHEDULES",
    "RECOMPUTE_POLICIES",
    "TRAIN_DTYPES",
    "TrainOptions",
    "TrainingResult",
    "TrainingReview",
    "check_train_devices",
    "review_training",
    "train_step",
    "training_document",
    "training_sheet",
    "MapperError",
    "ProfileError",
    "error_line",
    "printable",
    "markdown_text",
    "markdown_code",
    "format_bytes",
    "DURATION_UNITS",
    "MINUTE_S",
    "format_duration",
    "format_energy",
    "format_number",
    "overload_sentence",
    "Graph",
    "LayerType",
    "OpClass",
    "HardwareProfile",
    "list_hardware",
    "load_hardware",
    "edit_profile",
    "flatten_profile",
    "ModelHandle",
    "open_model",
    "load_model",
    "BUILTIN_DEFAULT_DIMS",
    "Workload",
    "analyze_graph",
    "dim_roles",
    "load_workload",
    "map_workload",
    "Question",
    "DEFAULT_OUTPUT_TOKENS",
    "Targets",
    "TARGET_ROWS",
    "LoadSource",
    "ServedLoad",
    "Assessment",
    "assess_slice",
    "question_flags",
    "PLAN_DTYPES",
    "WEIGHT_DTYPES",
    "RUNTIMES",
    "KV_CACHE_MODES",
    "KV_DTYPES",
    "GQA_DECODES",
    "LAUNCHES",
    "SPARSITIES",
    "FUSION_POLICIES",
    "LAYOUTS",
    "MAX_PARALLEL_DEGREE",
    "MODEL_CACHE_BYTES",
    "setting",
    "setting_text",
    "MODEL_IDLE_SECONDS",
    "MAPPINGS_PER_MODEL",
    "mapping_document",
    "group_kernels",
    "module_path",
    "layer_pattern",
    "MEMORY_STALL_DEFINITION",
    "SPEEDUP_DEFINITION",
    "PLAN_FIELDS",
    "PlanField",
    "format_option",
    "parse_option",
    "options_query",
    "options_from_query",
    "reproduce_command",
    "Finding",
    "first_failure",
    "assessed_failure",
    "AnswerRow",
    "answer_rows",
    "headline",
    "load_text",
    "precision_text",
    "verdict_sentence",
    "KernelAssessment",
    "KernelEstimate",
    "MappingResult",
    "PlanOptions",
    "__version__",
    "ZOO_NAMES",
    "build_zoo_model",
    "list_zoo",
    "zoo_model_bytes",
    "ServingConfig",
    "ServingResult",
    "simulate_serving",
    "simulate_model_serving",
    "load_curve",
    "power_curve",
    "ServeRequest",
    "ServingRun",
    "serve_model",
    "is_decoder",
    "LLMServingConfig",
    "LLMServingResult",
    "SCHEDULERS",
    "SpeculativeConfig",
    "Pool",
    "Disaggregation",
    "DisaggregatedRun",
    "simulate_disaggregated",
    "DEFAULT_DRAFT_TOKENS",
    "expected_tokens",
    "validate_speculative",
    "open_draft",
    *_LAZY,
]
