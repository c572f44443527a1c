#!/usr/bin/env bash
# bubblewrap's `bwrap` is the sandbox choir.exec runs commands in; without it the tool refuses
# to run, and its tests (in make check too) need the real thing.
# Installed from Debian's packages when missing (CI runs as root on a fresh machine).
set -euo pipefail
if command -v bwrap >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "ensure_bwrap: installing Debian's bubblewrap package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null
    exit 0
fi
echo "ensure_bwrap: bubblewrap's bwrap is missing; apt-get install bubblewrap" >&2
exit 1
