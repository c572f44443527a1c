#!/usr/bin/env bash
# Debian's chromium renders the static HTML run report in a test (headless, no sandbox, no
# network), which checks for console errors and keeps a screenshot. No browser download: the
# package comes from Debian, installed when missing (CI runs as root on a fresh machine).
set -euo pipefail
if command -v chromium >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "ensure_chromium: installing Debian's chromium package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq chromium >/dev/null
    exit 0
fi
echo "ensure_chromium: chromium is missing; as root: apt-get install -y chromium" >&2
exit 1
