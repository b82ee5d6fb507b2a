#!/bin/sh
# Install Debian's chromium for tests/test_browser.py (playwright drives it; no `playwright install`).
set -e
if [ -x /usr/bin/chromium ]; then
    echo "chromium already installed: $(/usr/bin/chromium --version 2>/dev/null || echo /usr/bin/chromium)"
elif [ "$(id -u)" = "0" ]; then
    echo "installing chromium with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium
    echo "installed: $(/usr/bin/chromium --version 2>/dev/null)"
else
    echo "chromium missing and not root: run 'apt-get install -y chromium' as root; the browser test will skip" >&2
fi
