"""The shared sidebar: what the user chose (model, bindings, profile, options, serving), kept in
st.session_state and mirrored in st.query_params so a pasted link opens the same view.

Uploads are read only from UploadedFile bytes. A bad upload leaves the previous model in place.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import streamlit as st

import mapper
from app_pages import hwform, ui
from mapper.core.errors import error_line

UPLOADED = "(uploaded model)"
CUSTOM_HW = "(custom profile)"
DTYPES = ("auto", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")
WEIGHT_DTYPES = ("same", "int8", "int4")
FUSIONS = ("default", "none", "aggressive")
LAYOUTS = ("auto", "nchw", "nhwc")
ATTENTION = {"as the fusion policy says": None, "on": True, "off": False}
TEST_UPLOAD_KEY = "test_upload"  # test hook: (filename, bytes) is handled like a sidebar upload
DEFAULTS = {"model": "resnet50", "hw": "h100-sxm", "dtype": "auto", "weight_dtype": "same", "fusion": "default",
            "layout": "auto", "attention": "as the fusion policy says", "power_cap_w": 0.0, "tp": 1, "pp": 1, "dp": 1,
            "rate_per_s": 500.0, "max_batch": 8, "max_wait_ms": 2.0, "p99_target_ms": 20.0, "presentation": False}


@dataclass(frozen=True)
class Selection:
    model_label: str
    model_key: str            # zoo name, or "upload:<sha256>"
    source: object = field(repr=False)  # zoo name or uploaded bytes
    dims: tuple               # ((name, value), ...)
    hw: mapper.HardwareProfile = field(repr=False)
    options: tuple            # PlanOptions fields as ((name, value), ...)
    serving: tuple            # ((name, value), ...) in SI units

    @property
    def key(self) -> tuple:
        return (self.model_key, self.dims, self.hw.sha256, self.options)


def upload_limit_mb() -> int:
    return int(st.get_option("server.maxUploadSize"))


def _init_state() -> None:
    """Defaults, then the link's query params, once per session."""
    ss = st.session_state
    if ss.get("_initialised"):
        return
    for k, v in DEFAULTS.items():
        ss.setdefault(k, v)
    q = st.query_params
    if q.get("model") in mapper.ZOO_NAMES:
        ss["model"] = q["model"]
    if q.get("hw") in mapper.list_hardware():
        ss["hw"] = q["hw"]
    for name, allowed in (("dtype", DTYPES), ("fusion", FUSIONS), ("layout", LAYOUTS)):
        if q.get(name) in allowed:
            ss[name] = q[name]
    for dim in ("batch", "seq", "past"):
        if dim in q:
            value = query_int(q[dim], 0 if dim == "past" else 1, QUERY_DIM_MAX)
            if value is None:
                ss["query_notice"] = f"The link's {dim}={str(q[dim])[:20]!r} is not a whole number from " \
                                     f"{0 if dim == 'past' else 1} to {QUERY_DIM_MAX}: ignored."
            else:
                ss[f"dim_{dim}"] = value
    ss["_initialised"] = True


QUERY_DIM_MAX = 1 << 20  # the sidebar's own bound on a dim (its number_input max_value)


def query_int(text: str, least: int, most: int) -> int | None:
    """A link's integer: ASCII digits only (str.isdigit accepts '²', which int() refuses), within bounds."""
    text = str(text)
    if not (0 < len(text) <= 8 and text.isascii() and text.isdigit()):
        return None
    value = int(text)
    return value if least <= value <= most else None


def symbolic_dims(data: bytes) -> list[str]:
    """The free dims of an uploaded model (and a merged decoder's branch input), by the engine's reading."""
    return list(mapper.dim_roles(data))


def upload_default(dim: str) -> int:
    """Where an uploaded model's dim starts: an empty KV cache (a prefill) for a past length, else the
    built-ins' default for the name, else 1."""
    return 0 if "past" in dim.lower() else mapper.BUILTIN_DEFAULT_DIMS.get(dim, 1) or 1


def accept_upload(name: str, data: bytes) -> None:
    """Validate an uploaded model; on success it becomes the model, on failure the old one stays."""
    ss = st.session_state
    ss.pop("upload_error", None)
    limit = upload_limit_mb()
    if len(data) > limit * 1024 * 1024:
        ss["upload_error"] = f"{name}: {len(data) / 1e6:.1f} MB is over the upload limit of {limit} MB (server.maxUploadSize in .streamlit/config.toml)"
        return
    try:
        dims = symbolic_dims(data)
        bind = {d: upload_default(d) for d in dims}
        mapper.load_workload(data, bind)
    except mapper.MapperError as e:
        ss["upload_error"] = f"{name}: {error_line(e)} (the previous model stays selected; upload limit {limit} MB)"
        return
    ss["uploaded"] = {"name": name, "bytes": data, "sha256": hashlib.sha256(data).hexdigest(), "dims": dims}
    for d in dims:
        ss.setdefault(f"dim_{d}", upload_default(d))
    ss["model"] = UPLOADED


def _on_model_upload() -> None:
    f = st.session_state.get("model_file")
    if f is not None:
        accept_upload(f.name, f.getvalue())


def _model_section() -> tuple[str, str, object, list[tuple[str, str]]]:
    ss = st.session_state
    if TEST_UPLOAD_KEY in ss:
        accept_upload(*ss.pop(TEST_UPLOAD_KEY))
    st.subheader("Model")
    choices = list(mapper.ZOO_NAMES) + ([UPLOADED] if "uploaded" in ss else [])
    if ss.get("model") not in choices:
        ss["model"] = DEFAULTS["model"]
    up = ss.get("uploaded")
    st.selectbox("Model", choices, key="model", label_visibility="collapsed",
                 format_func=lambda c: f"uploaded: {up['name']}" if c == UPLOADED and up else c)
    st.file_uploader(f"Upload an .onnx (up to {upload_limit_mb()} MB)", type=["onnx"], key="model_file",
                     on_change=_on_model_upload)
    if ss["model"] == UPLOADED:
        return up["name"], f"upload:{up['sha256']}", up["bytes"], [(d, "") for d in up["dims"]]
    entry = next(z for z in mapper.list_zoo() if z["name"] == ss["model"])
    return ss["model"], ss["model"], ss["model"], list(entry["dims"].items())


def _dims_section(dims: list[tuple[str, str]]) -> tuple:
    if not dims:
        return ()
    st.subheader("Shape bindings")
    out = []
    for name, help_text in dims:
        key = f"dim_{name}"
        # an empty KV cache is a prefill; a branch input (use_cache_branch) is 0 or 1; other dims need one
        least = 0 if "past" in name.lower() or "branch" in name.lower() else 1
        st.session_state.setdefault(key, max(mapper.BUILTIN_DEFAULT_DIMS.get(name, 1), least))
        out.append((name, int(st.number_input(ui.md(name), min_value=least, max_value=QUERY_DIM_MAX, step=1, key=key,
                                              help=help_text or None))))
    return tuple(out)


def _options_section() -> tuple:
    st.subheader("Plan options")
    c1, c2 = st.columns(2)
    c1.selectbox("dtype", DTYPES, key="dtype", help="auto keeps the model's own precision")
    c2.selectbox("weights", WEIGHT_DTYPES, key="weight_dtype", help="weight-only quantization")
    c1.selectbox("fusion", FUSIONS, key="fusion")
    c2.selectbox("layout", LAYOUTS, key="layout")
    with st.expander("More plan options"):
        st.selectbox("attention fusion", list(ATTENTION), key="attention")
        st.number_input("power cap (W, 0 = profile TDP)", min_value=0.0, step=50.0, key="power_cap_w")
    with st.expander("Devices (tensor / pipeline / data parallel)"):
        d1, d2, d3 = st.columns(3)
        d1.number_input("TP", min_value=1, max_value=64, step=1, key="tp", help="tensor-parallel degree")
        d2.number_input("PP", min_value=1, max_value=64, step=1, key="pp", help="pipeline stages")
        d3.number_input("DP", min_value=1, max_value=1024, step=1, key="dp", help="data-parallel replicas")
    ss = st.session_state
    return (("dtype", ss["dtype"]), ("weight_dtype", ss["weight_dtype"]), ("fusion", ss["fusion"]),
            ("attention_fusion", ATTENTION[ss["attention"]]), ("layout", ss["layout"]),
            ("power_cap_w", float(ss["power_cap_w"]) or None), ("tp", int(ss["tp"])), ("pp", int(ss["pp"])),
            ("dp", int(ss["dp"])))


def _serving_section() -> tuple:
    st.subheader("Serving")
    c1, c2 = st.columns(2)
    c1.number_input("rate (req/s)", min_value=1.0, step=50.0, key="rate_per_s")
    c2.number_input("max batch", min_value=1, max_value=1024, step=1, key="max_batch")
    c1.number_input("max wait (ms)", min_value=0.0, step=0.5, key="max_wait_ms")
    c2.number_input("p99 target (ms)", min_value=0.1, step=1.0, key="p99_target_ms")
    ss = st.session_state
    return (("rate_per_s", float(ss["rate_per_s"])), ("max_batch", int(ss["max_batch"])),
            ("max_wait_s", ss["max_wait_ms"] / 1e3), ("p99_target_s", ss["p99_target_ms"] / 1e3))


def sidebar() -> Selection | None:
    """Draw the shared sidebar; the current selection, or None while the profile is invalid."""
    _init_state()
    with st.sidebar:
        st.toggle("Presentation mode", key="presentation", help="larger type for screen sharing")
        label, key, source, dims = _model_section()
        if notice := st.session_state.pop("query_notice", None):
            st.warning(ui.md(notice))
        if err := st.session_state.get("upload_error"):
            st.error(ui.md(err))
        bound = _dims_section(dims)
        hw = hwform.hardware_section(CUSTOM_HW)
        options = _options_section()
        serving = _serving_section()
    if hw is None:
        return None
    return Selection(label, key, source, bound, hw, options, serving)


def write_query_params(sel: Selection, page_path: str) -> None:
    """Mirror a shareable view in the URL (built-in model and profile only; uploads can't travel)."""
    ss = st.session_state
    params = {"dtype": ss["dtype"], "fusion": ss["fusion"], "layout": ss["layout"]}
    if sel.model_key in mapper.ZOO_NAMES:
        params["model"] = sel.model_key
    if ss["hw"] != CUSTOM_HW:
        params["hw"] = ss["hw"]
    params |= {k: str(v) for k, v in sel.dims if k in ("batch", "seq", "past")}
    if page_path:
        params["page"] = page_path
    if dict(st.query_params) != params:
        st.query_params.from_dict(params)


PRESENTATION_CSS = """<style>
html, body, [data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li { font-size: 1.25rem; }
[data-testid="stMetricValue"] { font-size: 3.2rem !important; }
[data-testid="stMetricLabel"] p { font-size: 1.2rem !important; }
h1 { font-size: 3rem !important; } h2 { font-size: 2.3rem !important; } h3 { font-size: 1.8rem !important; }
[data-testid="stDataFrame"] { font-size: 1.15rem; }
</style>"""
BASE_CSS = """<style>
[data-testid="stMetricValue"] { font-size: 2.3rem; }
.st-key-verdict { font-size: 1.35em; line-height: 1.45; padding: 0.8rem 1.1rem; border-left: 6px solid #1f6feb;
           background: #eef4ff; border-radius: 6px; margin: 0.3rem 0 1rem 0; }
</style>"""


def apply_css() -> None:
    st.html(BASE_CSS + (PRESENTATION_CSS if st.session_state.get("presentation") else ""))
