"""Who may read which recorded run: a dashboard session owns what it recorded, CLI and CI runs are the team's.

A session is one browser, named by an unguessable token (`new_session_token`); the store keeps the token's
SHA-256 (`owner_of`), never the token, so whoever reads the database cannot act as a session. A run's link
carries its random public id (`public_run_id` checks one), never its sequential row id. No SQLAlchemy here:
the dashboard checks tokens and ids on every rerun without loading the store's modules.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from dataclasses import dataclass

from mapper.core.errors import MapperError

SESSION_TOKEN_BYTES = 32  # 256 random bits (secrets.token_urlsafe): 43 URL-safe characters
SESSION_TOKEN = re.compile(r"[A-Za-z0-9_-]{43}")  # what token_urlsafe(SESSION_TOKEN_BYTES) writes
PUBLIC_ID_BYTES = 16  # 128 random bits: a run's id in links (the row id counts up and is guessed in one try)
PUBLIC_ID = re.compile(r"[0-9a-f]{32}")  # secrets.token_hex(PUBLIC_ID_BYTES)
PUBLIC_ID_SHOWN = 40  # characters of a refused id quoted back in its message


def new_session_token() -> str:
    """A fresh session token: 256 bits from the operating system's generator."""
    return secrets.token_urlsafe(SESSION_TOKEN_BYTES)


def is_session_token(text: object) -> bool:
    """Whether `text` has a token's form (a browser's cookie is the user's text until checked)."""
    return isinstance(text, str) and SESSION_TOKEN.fullmatch(text) is not None


def owner_of(token: str) -> str:
    """The store's `owner` of a session's runs: its token's SHA-256, hex."""
    return hashlib.sha256(token.encode("ascii")).hexdigest()


def new_public_id() -> str:
    return secrets.token_hex(PUBLIC_ID_BYTES)


def public_run_id(text: object) -> str:
    """A run's public id from a link (`?run=...`), checked: 32 lowercase hex digits, else a one-line MapperError
    (a row number, '²' or 30 digits is no run's id)."""
    text = str(text)
    if PUBLIC_ID.fullmatch(text) is None:
        raise MapperError(f"no run {text[:PUBLIC_ID_SHOWN]!r}: a run's link carries its 32-hex-digit id")
    return text


@dataclass(frozen=True, slots=True)
class RunScope:
    """Which runs a reader sees: those of one session (`owner`, its token's hash), the team's (recorded with no
    session: the CLI and CI) when `team`, or every run (`every`: the CLI, which holds the database's URL and
    so the database itself)."""

    owner: str | None = None
    team: bool = False
    every: bool = False

    @classmethod
    def of_session(cls, token: str, team: bool = False) -> RunScope:
        """A session's own runs, and the team's when the operator turned the team view on."""
        if not is_session_token(token):
            raise MapperError("not a session token")
        return cls(owner=owner_of(token), team=team)

    @classmethod
    def team_only(cls) -> RunScope:
        return cls(team=True)


EVERY_RUN = RunScope(every=True)
