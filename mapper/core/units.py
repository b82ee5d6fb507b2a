"""Display units shared by the engine's two clients (the CLI and the dashboard)."""

from __future__ import annotations


def format_bytes(n_bytes: float | None) -> str:
    """Bytes in the unit that keeps a few significant digits (KB, MB, GB, TB; decimal, as datasheets)."""
    if n_bytes is None:
        return "—"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n_bytes >= scale:
            return f"{n_bytes / scale:,.3g} {unit}"
    return f"{n_bytes:,.0f} B"
