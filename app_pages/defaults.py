"""The sidebar's starting values and names, shared by the sidebar (state.py) and the link (link.py)."""

QUERY_DIM_MAX = 1 << 20  # the sidebar's own bound on a dim (its number_input max_value)
UPLOADED = "(uploaded model)"
CUSTOM_HW = "(custom profile)"
ATTENTION = {"as the fusion policy says": None, "on": True, "off": False}  # PlanOptions.attention_fusion
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
    "kv_dtype": "same",
    "gqa_decode": "auto",
    "launch": "auto",
    "ep": 1,
    "expert_imbalance": 1.0,
    "attention_dp": False,
    "expert_tp": False,
    "rate_per_s": None,  # derived: the highest rate meeting the targets, else the saturation rate
    "max_batch": None,  # the mapped batch
    "max_wait_ms": 0.0,  # the engine's (and `mapper map`'s) default: a batch is what has arrived
    "p99_target_ms": None,
    "ttft_p99_ms": None,
    "tpot_p99_ms": None,
    "prompt_tokens": None,  # the slice's context
    "output_tokens": 128,
    "scheduler": "prefill-first",
    "chunk_tokens": 512,
    "presentation": False,
    # the training step (the sidebar's training mode; `mapper train`'s defaults)
    "training": False,
    "train_micro_batch": 1,
    "train_global_batch": 8,
    "train_seq": 2048,
    "train_recompute": "selective",
    "train_zero": 1,
    "train_cp": 1,
    "train_vp": 1,
}


def least_value(role: str) -> int:
    """The smallest binding a dim of this role takes: an empty KV cache is a prefill, a branch input
    (use_cache_branch) is 0 or 1; every other dim needs at least one."""
    return 0 if role in ("past", "branch") else 1
