"""A pasted link opens the same view (AppTest reading the page): every plan option, the serving values and
presentation mode travel; an uploaded model's link says to upload it again; every header shows the command
that reproduces the slice; an edited profile exports as its own file; Validation measures uploads."""

import json
import shlex
from dataclasses import replace

import pytest
from streamlit.testing.v1 import AppTest

import mapper
from app_pages import session
from tests.conftest import APP
from tests.security.test_formulas import downloads
from tests.test_app import BERT_TINY, TIMEOUT, assert_clean, metric, shown, start, state, upload


@pytest.mark.slow
def test_a_pasted_link_with_tp8_and_int4_weights_opens_with_both():
    at = start(model="llama2-7b", tp=8, weight_dtype="int4", rate_per_s=2.5, presentation="on")
    assert_clean(at, "tp 8 int4 link")
    assert at.number_input(key="tp").value == 8 and at.selectbox(key="weight_dtype").value == "int4"
    doc = state(at).doc
    assert (doc["options"]["tp"], doc["options"]["weight_dtype"]) == (8, "int4")
    assert at.toggle(key="presentation").value is True
    command = shlex.split(at.code[0].value)
    assert command[:2] == ["mapper", "map"] and command[-2:] == ["--", "llama2-7b"]
    assert command[command.index("--tp") + 1] == "8" and command[command.index("--weight-dtype") + 1] == "int4"
    written = dict(at.query_params)
    assert (written["tp"], written["weight_dtype"], written["presentation"]) == ("8", "int4", "on")


def test_the_written_link_opens_the_same_numbers():
    """Change widgets, take the URL the app wrote, open it in a fresh session: the same document."""
    at = start(model="bert-base")
    at.selectbox(key="attention").set_value("off").run()
    at.number_input(key="power_cap_w").set_value(400.0).run()
    at.number_input(key="pp").set_value(2).run()
    first = dict(state(at).doc)
    link = dict(at.query_params)
    again = AppTest.from_file(APP, default_timeout=TIMEOUT)
    again.query_params.update(link)
    again.run()
    assert_clean(again, "reopened link")
    second = dict(state(again).doc)
    for doc in (first, second):
        doc.pop("created_utc")
    assert second == first and first["options"]["attention_fusion"] is False and first["options"]["pp"] == 2


def test_a_link_with_bad_option_values_says_so():
    at = start(dtype="fp3", tp="9999999", max_batch="x")
    assert not at.exception
    notice = " ".join(shown(w.value) for w in at.warning)
    assert "option dtype='fp3'" in notice and "option tp='9999999'" in notice and "max_batch='x'" in notice
    assert state(at).doc["options"]["tp"] == 1


def test_a_link_to_an_uploaded_model_asks_for_the_file_again():
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, BERT_TINY.name, BERT_TINY.read_bytes())
    at.run()
    sha = state(at).doc["model"]["sha256"]
    link = dict(at.query_params)
    assert link["upload"] == sha and "model" not in link
    assert shlex.split(at.code[0].value)[-1] == "MODEL.onnx" and any(sha in c.value for c in at.caption)
    reopened = start(**link)
    notice = " ".join(shown(w.value) for w in reopened.warning)
    assert f"uploaded model (sha256 {sha}): upload that model again" in notice


@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_an_edited_profile_exports_under_its_own_name_with_its_file():
    """Apply an edit as the sidebar's form does: the profile is h100-sxm-edited, its changed value is marked
    'edited by the user' (not the datasheet's source), and Export offers the profile file the command names."""
    at = start()
    base = mapper.load_hardware("h100-sxm")
    edited = mapper.edit_profile(base, {"memory.dram_bandwidth_bytes_per_s": 2e12}, display_name="H100 (edited)")
    at.session_state[session.KEY] = replace(state(at), custom_hw=edited)
    at.run()
    at.selectbox(key="hw").set_value("(custom profile)").run()
    at.switch_page("app_pages/export.py").run()
    assert_clean(at, "export of an edited profile")
    assert state(at).doc["hardware"]["name"] == "h100-sxm-edited"
    command = shlex.split(at.code[0].value)
    assert "--hw=h100-sxm-edited.json" in command
    files = downloads(at)
    profile = json.loads(next(data for label, data in files.items() if label.startswith("Profile file")))
    assert profile["memory"]["dram_bandwidth_bytes_per_s"]["source"].startswith("edited by the user (was 3.35e+12")
    assert mapper.load_hardware(profile).sha256 == edited.sha256
    sheet = json.loads(files["Mapping document (.json)"])
    bandwidth = next(a for a in sheet["assumptions"] if a["name"] == "memory.dram_bandwidth_bytes_per_s")
    assert bandwidth["source"].startswith("edited by the user")


@pytest.mark.slow  # runs the upload on ONNX Runtime: ~4.5 s
def test_validation_measures_an_uploaded_model_on_the_cpu_profile():
    """Measuring an upload runs and scores it (and calibrates from the very bytes); the header names the
    probed CPU profile it measured on, not the sidebar's H100."""
    at = AppTest.from_file(APP, default_timeout=TIMEOUT)
    upload(at, BERT_TINY.name, BERT_TINY.read_bytes())
    at.run()
    at.switch_page("app_pages/validation.py").run()
    next(b for b in at.button if b.label == "Probe this machine and measure").click().run(timeout=300)
    assert_clean(at, "validation of an upload")
    assert metric(at, "Measured p50") not in ("", "—")
    header = shown(at.caption[0].value)
    assert "measured here on" in header and "probed" in header and "H100" not in header.split(";")[0]
    assert any("Calibration" in h.value for h in at.subheader)


@pytest.mark.slow
def test_the_runtime_and_expert_options_have_sidebar_controls_that_change_the_numbers():
    """runtime, KV-cache update, launch, EP, expert imbalance and attention DP are widgets (not only link values): eager
    launches on Llama-2-7B decode add each kernel's launch back, and the link and the reproduce line carry them."""
    at = start(model="llama2-7b", seq=1, past=512)
    assert_clean(at, "llama2-7b decode")
    graph_s = state(at).doc["totals"]["latency_s"]
    at.selectbox(key="launch").set_value("eager").run()
    assert_clean(at, "eager launches")
    doc = state(at).doc
    assert doc["options"]["launch"] == "eager" and doc["totals"]["latency_s"] > graph_s
    assert "--launch eager" in at.code[0].value and dict(at.query_params)["launch"] == "eager"
    mixtral = start(model="mixtral-8x7b", seq=1, past=128, ep=2)
    assert_clean(mixtral, "mixtral ep 2")
    assert mixtral.number_input(key="ep").value == 2 and state(mixtral).doc["options"]["ep"] == 2
    mixtral.checkbox(key="attention_dp").check().run()  # one rank's step: its attention at its own batch
    assert_clean(mixtral, "mixtral ep 2, attention DP")
    doc = state(mixtral).doc
    assert doc["options"]["attention_dp"] is True and "--attention-dp" in mixtral.code[0].value
    assert dict(mixtral.query_params)["attention_dp"] == "on"  # the engine's text form
