"""The dashboard under light concurrent load (bench/load_dashboard.py runs the full size).

Two browser sessions in one headless Chromium upload different models at once against one loopback
server: each must keep seeing its own model, and the server must stay up. Skipped without
/usr/bin/chromium (scripts/install_browser.sh) or the playwright package.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if not Path("/usr/bin/chromium").exists():
    pytest.skip("/usr/bin/chromium missing: run scripts/install_browser.sh", allow_module_level=True)
pytest.importorskip("playwright.async_api", reason="playwright package missing: pip install playwright")
sys.path.insert(0, str(ROOT / "bench"))
import load_dashboard

pytestmark = pytest.mark.slow  # concurrent dashboard sessions on a live server, ~8 s


def test_concurrent_sessions_keep_their_own_upload_and_the_server_stays_up():
    figures = load_dashboard.run(sessions=2, rounds=1, deadline_s=240)
    assert figures["problems"] == []
    assert figures["server_up"]
    assert figures["actions"] == 2 * 3  # open, upload+map, one page visit per session
