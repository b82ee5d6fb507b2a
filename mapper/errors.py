"""The engine's one error type: every rejected input raises it with a one-line message.

The message names what is wrong and what to do about it; the CLI prints it as
`error: <message>` (exit 2) and the dashboard shows it in the page.
"""


class MapperError(Exception):
    """Bad input (model, profile, option, shape): a message a person can act on."""

    def __init__(self, message: str):
        # One line, always: callers print it verbatim after "error: ".
        super().__init__(" ".join(str(message).split()))
