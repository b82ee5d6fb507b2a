#!/usr/bin/env bash
# Sets everything up and runs the whole test suite; CI (.ci/run) calls exactly this.
# Needs only Python 3.11+ and the package registries; as root it also installs Debian's
# chromium for the real-browser test (elsewhere that test is skipped with its reason).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/venv.sh test  # .venv: the engine, every extra, the test tools and mkdocs
# The engine's own modules byte-compiled once, as the installer compiles the packages: with PYTHONDONTWRITEBYTECODE
# set (this project's machine) each of the suite's child processes would compile what it imports again (~0.2 CPU-s
# for the CLI's modules); a compiled file whose source changed is passed over, never used.
.venv/bin/python -m compileall -q mapper app_pages app.py
if [ -f scripts/install_browser.sh ]; then bash scripts/install_browser.sh || echo "note: chromium not installed; the browser test will be skipped"; fi
if [ -f scripts/install_postgres.sh ]; then bash scripts/install_postgres.sh || echo "note: postgresql not installed; the PostgreSQL store tests will be skipped"; fi
# strace for the sandbox audit (tests/security/test_sandbox.py), after install_browser.sh's apt-get update
if ! command -v strace >/dev/null && [ "$(id -u)" = "0" ]; then DEBIAN_FRONTEND=noninteractive apt-get install -y -qq strace || echo "note: strace not installed; the sandbox audit test will be skipped"; fi
# Style is checked, not argued: the formatter and the linter (rules in pyproject.toml) run first.
.venv/bin/ruff format --check mapper app_pages tests bench scripts app.py
.venv/bin/ruff check mapper app_pages tests bench scripts app.py
# Types are checked too: mypy over the engine (settings in pyproject.toml's [tool.mypy]).
.venv/bin/mypy
# The manual's site (mkdocs.yml), strict: a broken link or anchor fails the build.
.venv/bin/mkdocs build --strict --quiet --site-dir build/site
exec .venv/bin/python -m pytest "$@"
