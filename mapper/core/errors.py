"""The engine's one error type: every rejected input raises it with a one-line message.

The message names what is wrong and what to do about it; the CLI prints it as
`error: <message>` (exit 2) and the dashboard shows it in the page, both through
error_line: control characters escaped and the length bounded, because a message
may quote a name from the model, and a name can hold terminal escapes or a megabyte.
"""

import os
import re

from mapper.core.limits import MAX_ERROR_LINE_CHARS

# C0 controls but tab and LF, DEL, C1: ANSI escapes (ESC, CSI), CR (overwrites the line), BEL.
TERMINAL_CONTROLS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


class MapperError(Exception):
    """Bad input (model, profile, option, shape): a message a person can act on."""

    def __init__(self, message: str):
        # One line, always: callers print it verbatim after "error: ".
        super().__init__(" ".join(str(message).split()))


def printable(text: str) -> str:
    """Text with its control characters written out (ESC as \\x1b), so a name cannot drive a terminal."""
    return TERMINAL_CONTROLS.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def bounded(text: str, limit: int = MAX_ERROR_LINE_CHARS) -> str:
    """At most `limit` characters, the cut marked (limit named in mapper/core/limits.py)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def error_line(exc: BaseException | str) -> str:
    """The one line shown for an error: on one line, control characters escaped, length bounded."""
    return bounded(printable(" ".join(str(exc).split())))


def path_text(path: str | os.PathLike) -> str:
    """A path quoted for a message, shortened: a 5,000-character path would fill the screen."""
    return repr(bounded(os.fspath(path), 120))
