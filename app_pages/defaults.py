"""The sidebar's starting values and names, shared by the sidebar (state.py) and the link (link.py)."""

QUERY_DIM_MAX = 1 << 20  # the sidebar's own bound on a dim (its number_input max_value)
UPLOADED = "(uploaded model)"
CUSTOM_HW = "(custom profile)"
ATTENTION = {"as the fusion policy says": None, "on": True, "off": False}  # PlanOptions.attention_fusion
REQUESTS = 20_000  # per simulated load point of a request queue: p99 from 200 tail samples, quick on a click
LLM_REQUESTS = 1_000  # decoder requests per continuous-batching run (each decodes its output tokens)
DEFAULTS = {
    "model": "resnet50",
    "hw": "h100-sxm",
    "dtype": "auto",
    "weight_dtype": "same",
    "fusion": "default",
    "layout": "auto",
    "attention": "as the fusion policy says",
    "sparsity": "dense",
    "power_cap_w": 0.0,
    "tp": 1,
    "pp": 1,
    "dp": 1,
    "runtime": "auto",
    "kv_cache": "auto",
    "launch": "auto",
    "ep": 1,
    "expert_imbalance": 1.0,
    "rate_per_s": 500.0,
    "max_batch": 8,
    "max_wait_ms": 2.0,
    "p99_target_ms": 20.0,
    "llm_rate_per_s": 1.0,
    "prompt_tokens": 512,
    "output_tokens": 128,
    "scheduler": "prefill-first",
    "chunk_tokens": 512,
    "presentation": False,
}


def least_value(role: str) -> int:
    """The smallest binding a dim of this role takes: an empty KV cache is a prefill, a branch input
    (use_cache_branch) is 0 or 1; every other dim needs at least one."""
    return 0 if role in ("past", "branch") else 1
