"""Issue 31 item 5: names stay text everywhere, and a name is never read as an option.

GFM turns a bare address into a live link after the markdown is parsed, so escaping alone kept a model named
"https://evil.example" clickable in the Overview's verdict (checked in headless Chromium: the escaped name was
an <a>; with the word joiner it is text). The packet's README heading took the graph name raw. A file named
`--out=x.onnx` was read as an option by a reproduce command that put the model first.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

import mapper
from mapper.cli.main import main
from tests.security.hostile_names import BEACON, DIRECTIVES, OVERLAY, hostile_model

ROOT = Path(__file__).resolve().parents[2]
# mdast-util-gfm-autolink-literal's two finders (what Streamlit's and GitHub's renderers link), run on the text
# a parser leaves: an address or "www." after a start, a boundary or punctuation; an e-mail address.
GFM_URL = re.compile(r"(https?://|www(?=\.))([-.\w]+)", re.IGNORECASE)
GFM_EMAIL = re.compile(r"([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)")
HOSTILE_TEXTS = [
    "https://evil.example/x",
    "see www.evil.example now",
    "mail a@evil.example",
    "# Owned",
    BEACON,
    DIRECTIVES,
    OVERLAY,
    "`code` **bold** <b>x</b> [a](b)",
]
MARKUP = {"link_open", "image", "heading_open", "html_inline", "html_block", "code_inline", "strong_open", "em_open"}


def rendered(markdown: str) -> tuple[set[str], str]:
    """The token types a CommonMark parser makes of `markdown`, and the text it shows outside code spans (where GFM
    looks for autolinks)."""
    tokens = MarkdownIt("commonmark").parse(markdown)
    types, text = set(), []
    for token in tokens:
        types.add(token.type)
        for child in token.children or ():
            types.add(child.type)
            if child.type == "text":
                text.append(child.content)
    return types, " ".join(text)


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_markdown_text_is_inert_and_shows_the_text(text):
    types, shown = rendered(mapper.markdown_text(text))
    assert not types & MARKUP, types
    assert not GFM_URL.search(shown) and not GFM_EMAIL.search(shown), shown
    assert shown.replace("\u2060", "") == " ".join(text.split())  # what it shows is the name, less the joiners


@pytest.mark.parametrize("text", [*HOSTILE_TEXTS, "a `tick` and ``two``", "`edge`"])
def test_markdown_code_is_one_code_span_of_the_text(text):
    tokens = MarkdownIt("commonmark").parseInline(mapper.markdown_code(text))[0].children
    assert [t.type for t in tokens] == ["code_inline"] and tokens[0].content == " ".join(text.split())


def test_the_dashboard_escapes_with_the_engines_function():
    from app_pages import ui

    assert all(ui.md(t) == mapper.markdown_text(t) for t in HOSTILE_TEXTS)


def test_a_file_named_like_an_option_reproduces_as_the_model(tmp_path, capsys, monkeypatch):
    model = tmp_path / "--out=x.onnx"
    model.write_bytes(hostile_model(graph_name="g", names=("a", "b")))
    monkeypatch.chdir(tmp_path)
    assert main(["map", "--dim", "batch=2", "--json", "--", model.name]) == 0, capsys.readouterr().err
    first = json.loads(capsys.readouterr().out)
    words = shlex.split(first["reproduce"])
    assert words[-2:] == ["--", "--out=x.onnx"]
    assert main([*words[1:-2], "--json", *words[-2:]]) == 0, capsys.readouterr().err
    again = json.loads(capsys.readouterr().out)
    assert again["totals"] == first["totals"] and not (tmp_path / "x.onnx").exists()


@pytest.mark.slow
def test_a_hostile_packet_readme_is_text_and_rebuilds_from_a_file_named_like_an_option(tmp_path):
    """The graph name a heading, an image beacon and an address; the upload's file name an option; the note an
    option and markdown: the README has its own two headings only and no image or link, and reproduce.sh rebuilds
    every file in an empty folder with the model beside it under that name."""
    data = hostile_model(graph_name="# Owned " + BEACON + " https://evil.example", dim="batch")
    request = mapper.ReviewRequest(
        data,
        {"batch": 4},
        mapper.load_hardware("h100-sxm"),
        note="--out=evil.zip **pwned** ![x](http://127.0.0.1:9/n.png)",
        file_name="--out=x.onnx",
    )
    with zipfile.ZipFile(io.BytesIO(mapper.packet_bytes(mapper.run_review(request)))) as z:
        files = {n: z.read(n) for n in z.namelist()}
    readme = files["README.md"].decode()
    types, shown = rendered(readme)
    tokens = MarkdownIt("commonmark").parse(readme)
    headings = [tokens[i + 1].content for i, t in enumerate(tokens) if t.type == "heading_open"]
    assert len(headings) == 2 and headings[1] == "Rebuild every file", headings  # its own two, none of the name's
    assert not any("Owned" in h for h in headings[1:]) and headings[0].startswith("Review: `")
    assert not types & {"image", "link_open", "html_inline", "html_block"}, types
    assert not GFM_URL.search(shown), shown
    script = files["reproduce.sh"].decode()
    assert "-- ./--out=x.onnx" in script  # the file named like an option, after `--` and as a path
    folder = tmp_path / "rebuilt"
    (folder / "profiles").mkdir(parents=True)
    for name in ("reproduce.sh", "profiles/h100-sxm.json"):
        (folder / name).write_bytes(files[name])
    (folder / "--out=x.onnx").write_bytes(data)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    wrapper = bin_dir / "mapper"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m mapper "$@"\n')
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", PYTHONPATH=str(ROOT))
    subprocess.run(["sh", "reproduce.sh"], cwd=folder, env=env, check=True, capture_output=True, timeout=600)
    for name, content in files.items():
        assert (folder / name).read_bytes() == content, name
    assert not (folder / "evil.zip").exists() and not (folder / "x.onnx").exists()
