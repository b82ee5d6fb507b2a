#!/usr/bin/env bash
# Debian's PostgreSQL server binaries for tests/test_store_postgres.py, which starts a private cluster of
# its own in a temporary folder (initdb + pg_ctl, as the `postgres` user when run as root) and stops it.
# Does nothing where the binaries are already there; as non-root it can only say so (the test then skips).
set -euo pipefail
if command -v initdb >/dev/null || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != "0" ]; then
    echo "note: PostgreSQL is not installed and this is not root: the PostgreSQL store tests will be skipped"
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -qq postgresql >/dev/null || { apt-get update -qq && apt-get install -y -qq postgresql >/dev/null; }
