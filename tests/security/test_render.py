"""Red team, issue 15 item 3: no string from a model, an upload's file name or a profile is ever
rendered as HTML or markdown on the dashboard.

Every page is drawn for a model whose graph name is a full-page "Session expired" overlay with a
password form, whose node names and op type are markdown image beacons, links, streamlit colour
directives and LaTeX, uploaded under a beacon file name with a profile whose display_name is a
beacon too. Then every element in the page is read back: no element that renders markdown or HTML
may carry the payload raw (an escaped `\\!\\[` or `&lt;div` is text), and nothing allows HTML with it.
"""

import re
from dataclasses import replace

import pytest
from google.protobuf.json_format import MessageToDict
from streamlit.testing.v1 import AppTest

import mapper
from app_pages import session
from tests.conftest import APP, PAGES
from tests.security.hostile_names import OVERLAY, hostile_model

FILE_NAME = "![f](http://127.0.0.1:9/file.png).onnx"
PROFILE_NAME = "![p](http://127.0.0.1:9/profile.png) <b>GPU</b>"
# What may never reach a markdown/HTML renderer unescaped: an image or link opener, an HTML tag.
RAW = ("![b](", "![f](", "![p](", "](http", "<div", "<form", "<b>", ":red[", "$x^2$")
# ... raw: not behind the backslash that makes markdown show the character as itself.
RAW_RE = re.compile("|".join(r"(?<!\\)" + re.escape(r) for r in RAW))


def dashboard(at: AppTest) -> session.DashboardState:
    """The dashboard's one session object (app_pages/session.py)."""
    return at.session_state[session.KEY]


def hand_upload(at: AppTest, name: str, data: bytes) -> AppTest:
    """Give the sidebar a model as its uploader would, on the first run."""
    at.session_state[session.KEY] = session.DashboardState(pending_upload=(name, data))
    return at


TEXT_ONLY = {
    "dataframe",
    "arrow_data_frame",
    "arrow_table",
    "json",
    "text",
    "code",
    "file_uploader",
    "download_button",
    "selectbox",
    "multiselect",
    "radio",
    "data_editor",
}  # shown as text or data


def strings(value):
    """Every string inside a proto's dict form."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def nodes(block):
    for child in getattr(block, "children", {}).values():
        yield child
        yield from nodes(child)


def rendered_text(at: AppTest):
    """(element type, string) for every string of every element that renders markdown or HTML."""
    for node in nodes(at._tree):
        proto = getattr(node, "proto", None)
        if proto is None or node.type in TEXT_ONLY:
            continue
        fields = MessageToDict(proto)
        if node.type == "plotly_chart":  # plotly renders a subset of HTML, never markdown
            yield from (("plotly", s) for s in strings(fields) if re.search("<(div|form|b>)", s))
            continue
        yield from ((node.type, s) for s in strings(fields))


def offenders(at: AppTest) -> list[tuple[str, str]]:
    return [(kind, s[:160]) for kind, s in rendered_text(at) if RAW_RE.search(s)]


def html_with_data(at: AppTest) -> list[str]:
    """Markdown elements that allow HTML and carry anything from the model."""
    return [
        m.value[:160]
        for m in at.markdown
        if getattr(m.proto, "allow_html", False)
        and any(word in m.value for word in ("Session expired", "beacon", "127.0.0.1"))
    ]


@pytest.fixture(scope="module")
def app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=120)
    hand_upload(at, FILE_NAME, hostile_model())
    at.run()
    assert at.session_state["model"] == "(uploaded model)", [e.value for e in at.error]
    return at


def test_hostile_model_names_render_as_text_on_every_page(app):
    assert OVERLAY in dashboard(app).doc["model"]["name"]  # the payload did reach the page
    found = {}
    for page in PAGES:
        app.switch_page(f"app_pages/{page}.py").run()
        assert not app.exception, f"{page}: {[e.value for e in app.exception]}"
        assert not html_with_data(app), f"{page}: HTML allowed with model text: {html_with_data(app)}"
        if bad := offenders(app):
            found[page] = bad
    assert not found, f"model text rendered as markdown/HTML: {found}"


def test_escaped_forms_are_what_the_page_shows(app):
    """The verdict and the unmodeled warning show the names, escaped (not dropped)."""
    app.switch_page("app_pages/overview.py").run()
    bodies = [m.value for m in app.markdown] + [w.value for w in app.warning]
    assert any("Session expired" in b and "&lt;div" in b or "\\<div" in b for b in bodies), bodies
    assert any("\\!\\[b\\]" in w.value for w in app.warning), [w.value for w in app.warning]


def test_hostile_profile_display_name_renders_as_text(app):
    hw = mapper.load_hardware("h100-sxm").to_dict()
    hw["meta"]["display_name"] = PROFILE_NAME
    app.session_state[session.KEY] = replace(
        dashboard(app), custom_hw=mapper.load_hardware(hw)
    )  # as an upload leaves it
    app.run()
    app.selectbox(key="hw").set_value("(custom profile)").run()
    assert dashboard(app).selection.hw.display_name == PROFILE_NAME
    found = {}
    for page in ("overview", "hardware", "validation", "sweep"):
        app.switch_page(f"app_pages/{page}.py").run()
        assert not app.exception, f"{page}: {[e.value for e in app.exception]}"
        if bad := offenders(app):
            found[page] = bad
    assert not found, f"profile text rendered as markdown/HTML: {found}"
