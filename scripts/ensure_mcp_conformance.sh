#!/usr/bin/env bash
# The MCP conformance suite (@modelcontextprotocol/conformance, from npm), pinned, into
# .mcp-servers/conformance/ (ignored by git): `make mcp-conformance` and
# tests/tools/test_issue49_mcp_conformance.py run it against stargraph's MCP client and
# `stargraph mcp serve`. The suite needs Node.js >= 22 (fs.globSync); the node package from npm
# brings one into the same directory, so the system's node is left alone. Idempotent: a stamp
# naming the pinned versions skips the work.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.mcp-servers/conformance
VERSION=0.1.16
NODE=22.23.3
STAMP="$DEST/.installed-$VERSION-$NODE"
if [ -f "$STAMP" ]; then
    exit 0
fi
command -v npm >/dev/null || { echo "ensure_mcp_conformance: npm is missing; apt-get install nodejs npm" >&2; exit 1; }
mkdir -p "$DEST"
echo "ensure_mcp_conformance: installing @modelcontextprotocol/conformance@$VERSION (node $NODE) into $DEST"
# A package.json of our own keeps npm from walking up into the repository.
[ -f "$DEST/package.json" ] || echo '{"name": "stargraph-mcp-conformance", "private": true}' >"$DEST/package.json"
npm install --prefix "$DEST" --no-audit --no-fund --loglevel=error \
    "@modelcontextprotocol/conformance@$VERSION" "node@$NODE" >/dev/null
"$DEST/node_modules/node/bin/node" --version >/dev/null
rm -f "$DEST"/.installed-*
touch "$STAMP"
