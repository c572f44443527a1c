#!/usr/bin/env bash
# Graphviz's `dot` renders graph pictures to PNG/SVG; the picture tests need the real thing.
# Installed from Debian's packages when missing (CI runs as root on a fresh machine).
set -euo pipefail
if command -v dot >/dev/null; then
    exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null; then
    echo "ensure_graphviz: installing Debian's graphviz package"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends graphviz >/dev/null
    exit 0
fi
echo "ensure_graphviz: graphviz's dot is missing; apt-get install graphviz" >&2
exit 1
