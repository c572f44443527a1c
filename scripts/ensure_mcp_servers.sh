#!/usr/bin/env bash
# The MCP tests drive real third-party MCP servers: the protocol's reference servers from npm
# (server-everything, the SDK's own test server with stdio and streamable HTTP modes, and
# server-filesystem) and mcp-server-time from PyPI. They are installed here, pinned, into
# .mcp-servers/ (ignored by git), and the tests find them there; a missing one fails them.
# Idempotent: a stamp naming the pinned versions skips the work when nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.mcp-servers
EVERYTHING=2026.1.26
FILESYSTEM=2026.1.14
TIME=2026.10.19
STAMP="$DEST/.installed-$EVERYTHING-$FILESYSTEM-$TIME"
if [ -f "$STAMP" ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "ensure_mcp_servers: npm is missing; apt-get install nodejs npm" >&2; exit 1; }
mkdir -p "$DEST/node"
echo "ensure_mcp_servers: installing the MCP servers into $DEST"
# A package.json of our own keeps npm from walking up into the repository.
[ -f "$DEST/node/package.json" ] || echo '{"name": "stargraph-mcp-test-servers", "private": true}' >"$DEST/node/package.json"
npm install --prefix "$DEST/node" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/server-everything@$EVERYTHING" \
    "@modelcontextprotocol/server-filesystem@$FILESYSTEM" >/dev/null
# mcp-server-time gets a venv of its own: it pins its own version of the mcp SDK, which must
# not move the one stargraph is tested with.
PY=${PY:-python3}
[ -x "$DEST/time/bin/python" ] || "$PY" -m venv "$DEST/time"
"$DEST/time/bin/python" -m pip install -q "mcp-server-time==$TIME"
rm -f "$DEST"/.installed-*
touch "$STAMP"
