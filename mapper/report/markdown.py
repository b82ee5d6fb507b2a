"""Data inside markdown as inert text: what the dashboard's pages and the review packet's README.md both write.

Names reach markdown from the model (graph, node and dim names), the upload's file name, the profile and the
reviewer's own --owner and --note: each can hold markdown (a heading, an image beacon), HTML, streamlit
directives (:red[...]), KaTeX ($...$) or a bare address that GFM turns into a live link. `markdown_text` is the
one escape for all of them inside prose; `markdown_code` writes a name that stands alone as a code span (the
README, read raw as often as rendered). A template's own markup is never passed through either.
"""

from __future__ import annotations

import re

from mapper.core.errors import printable

# Every ASCII character markdown, streamlit (:red[...], :material/...:) or KaTeX ($...$) gives a meaning to: a
# backslash before any ASCII punctuation is an escape in CommonMark, so escaping more than needed is harmless.
MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$:&=^\"'])")
# Where GFM's autolink literals start (mdast-util-gfm-autolink-literal, and GitHub's renderer: "http://",
# "https://", "www." and an address's "@"). They are found in the parsed text, after escapes are undone, so no
# escape stops them (a model named "https://evil.example" became a live link in the verdict): a word joiner
# (U+2060, invisible) goes inside each.
AUTOLINK_STARTS = re.compile(r"(?i)(?<=http)(?=s?:)|(?<=www)(?=\.)|(?=@)")
WORD_JOINER = "\u2060"


def markdown_text(value: object) -> str:
    """`value` as markdown that shows it verbatim: on one line, control characters written out, every special
    character backslash-escaped, and no autolink."""
    text = printable(" ".join(str(value).split()))
    return MARKDOWN_SPECIALS.sub(r"\\\1", AUTOLINK_STARTS.sub(WORD_JOINER, text))


def markdown_code(value: object) -> str:
    """`value` as an inline code span: inert (no markup, no autolink) and readable as plain text, for a name that
    stands alone. Its fence is one backtick longer than any run inside it (CommonMark), padded where it touches a
    backtick."""
    text = printable(" ".join(str(value).split()))
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"
