"""The shared sidebar: what the user chose (model, bindings, profile, options, serving), as a typed
Selection in the session (app_pages/session.py) and mirrored in st.query_params so a pasted link opens
the same view. The widgets keep their values under their own keys; only this module and hwform.py
touch those keys, and the pages read the Selection.

Uploads are read only from UploadedFile bytes. A bad upload leaves the previous model in place.
"""

from __future__ import annotations

import hashlib

import streamlit as st

import mapper
from app_pages import cache, hwform, link, session, style, ui
from app_pages.defaults import (
    ATTENTION,
    CUSTOM_HW,
    DEFAULTS,
    QUERY_DIM_MAX,
    UPLOADED,
    least_value,
)
from app_pages.session import Selection, Upload

SCHEDULER_HELP = "prefill-first: prompts prefill as one step; decode-first: the batch drains first; chunked: mixed"


RUNTIME_HELP = (
    "auto: a decoder on a GPU is mapped as vLLM serves it (in-place KV cache, CUDA graphs); else ONNX Runtime"
)


def upload_limit_mb() -> int:
    return int(st.get_option("server.maxUploadSize"))


def _init_state() -> None:
    """Defaults, then the link's query params, once per session."""
    ss = st.session_state
    if session.get().initialised:
        return
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    q = st.query_params
    if q.get("model") in mapper.ZOO_NAMES:
        ss["model"] = q["model"]
    if q.get("hw") in mapper.list_hardware():
        ss["hw"] = q["hw"]
    notices = link.read_link(q)
    session.update(initialised=True, query_notice=" ".join(notices) or None)


def default_binding(dim: str, role: str) -> int:
    """Where a dim starts: an empty KV cache (a prefill) for a past length, else the built-ins' default
    for the name (a branch input: 1, the decoder that reads the cache), else 1."""
    return 0 if role == "past" else max(mapper.BUILTIN_DEFAULT_DIMS.get(dim, 1), 1)


def accept_upload(name: str, data: bytes) -> None:
    """Validate an uploaded model; on success it becomes the model, on failure the old one stays."""
    session.update(upload_error=None)
    limit = upload_limit_mb()
    if len(data) > limit * 1024 * 1024:
        session.update(
            upload_error=f"{name}: {len(data) / 1e6:.1f} MB is over the upload limit of {limit} MB "
            "(server.maxUploadSize in .streamlit/config.toml); upload its graph alone: "
            "mapper strip MODEL.onnx -o graph.onnx writes it (weights left out, a few hundred kB)"
        )
        return
    sha = hashlib.sha256(data).hexdigest()
    try:
        model = cache.model(f"upload:{sha}", data, name)
        cache.workload(f"upload:{sha}", tuple((d, default_binding(d, r)) for d, r in model.roles.items()), data, name)
    except mapper.MapperError as e:
        session.update(
            upload_error=f"{name}: {mapper.error_line(e)} (the previous model stays selected; upload limit {limit} MB)"
        )
        return
    session.update(upload=Upload(name, model.data, sha, dict(model.roles)))  # the structure: weights not kept
    for d, role in model.roles.items():
        st.session_state.setdefault(f"dim_{d}", default_binding(d, role))
    st.session_state["model"] = UPLOADED


def _on_model_upload() -> None:
    f = st.session_state.get("model_file")
    if f is not None:
        accept_upload(f.name, f.getvalue())


def _model_section() -> tuple[str, str, object, list[tuple[str, str, str]]]:
    """(label, model key, source, [(dim, role, help)]) of the chosen model."""
    ss = st.session_state
    if (pending := session.get().pending_upload) is not None:
        session.update(pending_upload=None)
        accept_upload(*pending)
    st.subheader("Model")
    up = session.get().upload
    choices = list(mapper.ZOO_NAMES) + ([UPLOADED] if up else [])
    if ss.get("model") not in choices:
        ss["model"] = DEFAULTS["model"]
    chosen = st.selectbox(
        "Model",
        choices,
        key="model",
        label_visibility="collapsed",
        format_func=lambda c: f"uploaded: {up.name}" if c == UPLOADED and up else c,
    )
    st.file_uploader(
        f"Upload an .onnx or a Hugging Face config.json (up to {upload_limit_mb()} MB)",
        type=["onnx", "json"],
        key="model_file",
        on_change=_on_model_upload,
    )
    if chosen == UPLOADED:
        return up.name, up.model_key, up.data, [(d, role, "") for d, role in up.roles.items()]
    entry = next(z for z in mapper.list_zoo() if z["name"] == chosen)
    roles = cache.model(chosen, chosen, chosen).roles
    return chosen, chosen, chosen, [(d, roles.get(d, "other"), help_text) for d, help_text in entry["dims"].items()]


def _dims_section(dims: list[tuple[str, str, str]]) -> tuple:
    if not dims:
        return ()
    st.subheader("Shape bindings")
    out = []
    for name, role, help_text in dims:
        key = f"dim_{name}"
        least = least_value(role)
        st.session_state.setdefault(key, default_binding(name, role))
        out.append(
            (
                name,
                int(
                    st.number_input(
                        ui.md(name), min_value=least, max_value=QUERY_DIM_MAX, step=1, key=key, help=help_text or None
                    )
                ),
            )
        )
    return tuple(out)


def _options_section() -> mapper.PlanOptions:
    st.subheader("Plan options")
    c1, c2 = st.columns(2)
    dtype = c1.selectbox(
        "dtype",
        mapper.PLAN_DTYPES,
        key="dtype",
        help="auto: the model's released precision (a config's torch_dtype, a built-in's release, a file's tensors)",
    )
    weight_dtype = c2.selectbox("weights", mapper.WEIGHT_DTYPES, key="weight_dtype", help="weight-only quantization")
    fusion = c1.selectbox("fusion", mapper.FUSION_POLICIES, key="fusion")
    layout = c2.selectbox("layout", mapper.LAYOUTS, key="layout")
    with st.expander("More plan options"):
        attention = st.selectbox("attention fusion", list(ATTENTION), key="attention")
        power_cap_w = st.number_input("power cap (W, 0 = profile TDP)", min_value=0.0, step=50.0, key="power_cap_w")
        sparsity = st.selectbox(
            "sparsity", mapper.SPARSITIES, key="sparsity", help="2:4 structured sparsity of weight GEMMs (caveat)"
        )
    with st.expander("Devices (tensor / pipeline / data parallel)"):
        d1, d2, d3 = st.columns(3)
        most = mapper.MAX_PARALLEL_DEGREE  # the engine's bound on each degree
        tp = d1.number_input("TP", min_value=1, max_value=most, step=1, key="tp", help="tensor-parallel degree")
        pp = d2.number_input("PP", min_value=1, max_value=most, step=1, key="pp", help="pipeline stages")
        dp = d3.number_input("DP", min_value=1, max_value=most, step=1, key="dp", help="data-parallel replicas")
    runtime = _runtime_section()
    linked = session.get().link_options  # options without a widget, as the link set them
    if linked:
        st.caption("From the link: " + ui.md(", ".join(f"{k}={v}" for k, v in linked.items())))
    return mapper.PlanOptions(
        dtype=dtype,
        weight_dtype=weight_dtype,
        fusion=fusion,
        attention_fusion=ATTENTION[attention],
        layout=layout,
        power_cap_w=float(power_cap_w) or None,
        tp=int(tp),
        pp=int(pp),
        dp=int(dp),
        sparsity=sparsity,
        **runtime,
        **linked,
    )


def _runtime_section() -> dict:
    """The serving runtime (a preset of KV-cache update and launch, or each set) and mixture-of-experts
    options: PlanOptions' runtime, kv_cache, kv_dtype, launch, gqa_decode, ep, expert_imbalance, attention_dp and
    expert_tp, as `mapper map` takes them."""
    with st.expander("Runtime and experts"):
        r1, r2, r3, r4 = st.columns(4)
        choice = {
            "runtime": r1.selectbox("runtime", mapper.RUNTIMES, key="runtime", help=RUNTIME_HELP),
            "kv_cache": r2.selectbox("KV cache", mapper.KV_CACHE_MODES, key="kv_cache", help="auto: the preset's"),
            "kv_dtype": r3.selectbox(
                "KV dtype", mapper.KV_DTYPES, key="kv_dtype", help="the cache's storage precision"
            ),
            "launch": r4.selectbox("launch", mapper.LAUNCHES, key="launch", help="graph: CUDA-graph replay"),
        }
        e1, e2, e3, e4 = st.columns(4)
        choice["gqa_decode"] = e3.selectbox(
            "GQA decode", mapper.GQA_DECODES, key="gqa_decode",
            help="decode attention over grouped-query heads: packed into one kernel's rows, or per head; auto: the"
            " runtime preset's",
        )  # fmt: skip
        most = mapper.MAX_PARALLEL_DEGREE
        ep = e1.number_input("EP", min_value=1, max_value=most, step=1, key="ep", help="expert-parallel degree")
        imbalance = e2.number_input(
            "expert imbalance", min_value=1.0, max_value=float(most), step=0.25, key="expert_imbalance",
            help="busiest expert's tokens over the mean (MoE)",
        )  # fmt: skip
        attention_dp = e4.checkbox(
            "attention DP", key="attention_dp",
            help="attention data-parallel over the EP devices (TP 1, EP of 2 or more): each rank its own requests and"
            " KV cache; the numbers are one rank's",
        )  # fmt: skip
        expert_tp = e4.checkbox(
            "expert TP", key="expert_tp",
            help="with attention DP: every expert sliced over the EP ranks (TensorRT-LLM's MoE TP) instead of whole"
            " experts a rank; the ranks' tokens gathered to each, the sums reduce-scattered back",
        )  # fmt: skip
    return choice | {
        "ep": int(ep),
        "expert_imbalance": float(imbalance),
        "attention_dp": bool(attention_dp),
        "expert_tp": bool(expert_tp),
    }


def _optional(column, label: str, key: str, help_text: str, least: float = 0.01, empty: str = "none") -> float | None:
    """A number the user may leave empty (None: no target, or a rate the engine derives and says so)."""
    return column.number_input(label, min_value=least, step=1.0, key=key, help=help_text, placeholder=empty)


def _serving_section(decoder: bool) -> mapper.Question:
    """The serving question (mapper.Question), under the names `mapper map/serve/review` use: the rate (empty:
    derived from the targets, else the saturation rate), the max batch (empty: the mapped batch), the latency
    targets; a decoder's request lengths and scheduler, a request queue's batching wait."""
    st.subheader("Serving")
    c1, c2 = st.columns(2)
    rate = _optional(
        c1,
        "rate (req/s)",
        "rate_per_s",
        "empty: the highest rate meeting the targets, else saturation",
        empty="derived",
    )
    max_batch = c2.number_input(
        "max sequences" if decoder else "max batch", min_value=1, max_value=1024, step=1, key="max_batch",
        help="empty: the mapped batch" + ("; sequences decoding together" if decoder else ""), placeholder="mapped",
    )  # fmt: skip
    targets = {"p99_s": _optional(c1, "p99 target (ms)", "p99_target_ms", "request latency, end to end", 0.1)}
    if decoder:
        targets["ttft_p99_s"] = _optional(c2, "TTFT p99 target (ms)", "ttft_p99_ms", "time to first token", 0.1)
        targets["tpot_p99_s"] = _optional(c1, "TPOT p99 target (ms)", "tpot_p99_ms", "time per output token", 0.1)
        prompt = c2.number_input(
            "prompt tokens", min_value=1, step=64, key="prompt_tokens", placeholder="context",
            help="empty: the slice's context (its KV cache, else its sequence)",
        )  # fmt: skip
        output = c1.number_input("output tokens", min_value=1, step=16, key="output_tokens")
        scheduler = c2.selectbox("scheduler", mapper.SCHEDULERS, key="scheduler", help=SCHEDULER_HELP)
        chunk = c1.number_input(
            "chunk tokens", min_value=1, step=128, key="chunk_tokens", disabled=scheduler != "chunked"
        )
        request = {"output_tokens": int(output), "scheduler": scheduler, "chunk_tokens": int(chunk)}
        wait_ms = 0.0
    else:
        prompt = None
        wait_ms = c2.number_input("max wait (ms)", min_value=0.0, step=0.5, key="max_wait_ms")
        request = {"load_curve": True}
    config = mapper.ServingConfig(
        max_batch=int(max_batch or 1), max_wait_s=wait_ms / 1e3, rate_per_s=float(rate or 1.0)
    )
    serve = mapper.ServeRequest(config, follow_mapped_batch=max_batch is None, **request)
    chosen = mapper.Targets(**{k: v / 1e3 if v else None for k, v in targets.items()})
    return mapper.Question(serve, rate is not None, chosen, int(prompt) if prompt else None)  # requests: the engine's


def _training_section(options: mapper.PlanOptions) -> mapper.TrainOptions | None:
    """The training mode: a training step of the model (`mapper train`) on the plan's TP x PP x DP (x CP) with
    its batch, sequence, recompute and ZeRO stage; None when the mode is off or the plan does not add up (the
    reason shown here, as `mapper train` prints it)."""
    on = st.toggle("Training step", key="training", help="map a training step instead of an inference slice")
    if not on:
        return None
    with st.expander("Training step", expanded=True):
        t1, t2 = st.columns(2)
        chosen = {
            "micro_batch": t1.number_input("micro-batch", min_value=1, step=1, key="train_micro_batch"),
            "global_batch": t2.number_input("global batch", min_value=1, step=1, key="train_global_batch"),
            "seq": t1.number_input("sequence", min_value=1, step=256, key="train_seq"),
            "recompute": t2.selectbox("recompute", mapper.RECOMPUTE_POLICIES, key="train_recompute"),
            "zero": t1.selectbox("ZeRO", (0, 1, 2, 3), key="train_zero", help="3 = FSDP"),
            "cp": t2.number_input("CP", min_value=1, step=1, key="train_cp", help="context parallel (ring)"),
            "vp": t1.number_input("virtual stages", min_value=1, step=1, key="train_vp", help="interleaved 1F1B"),
        }
    dtype = options.dtype if options.dtype in mapper.TRAIN_DTYPES else "auto"
    try:
        return mapper.TrainOptions(
            tp=options.tp, pp=options.pp, dp=options.dp, ep=options.ep, dtype=dtype,
            **{k: v if isinstance(v, str) else int(v) for k, v in chosen.items()},
        )  # fmt: skip
    except mapper.MapperError as e:
        st.error(ui.md(mapper.error_line(e)))
        return None


def sidebar() -> Selection | None:
    """Draw the shared sidebar; the current selection, or None while the profile is invalid."""
    _init_state()
    if notices := link.take_queued_view():  # a page opened a view (a Search point) on the run before this one
        session.update(query_notice=" ".join(notices))
    with st.sidebar:
        presentation = st.toggle("Presentation mode", key="presentation", help="larger type for screen sharing")
        label, key, source, dims = _model_section()
        if notice := session.get().query_notice:
            session.update(query_notice=None)
            st.warning(ui.md(notice))
        if err := session.get().upload_error:
            st.error(ui.md(err))
        bound = _dims_section(dims)
        hw, hw_choice = hwform.hardware_section(CUSTOM_HW)
        options = _options_section()
        training = _training_section(options)
        serving = _serving_section(mapper.is_decoder(cache.model(key, source, label)))
    style.apply_css(presentation)
    if hw is None:
        return None
    return Selection(label, key, source, bound, hw, hw_choice, options, serving, training)
